"""Compatibility path: the tiny Qwen2.5-VL builder lives in :mod:`ares_cli.toy.tiny_vl`.

Kept so that code written against this old documented path keeps working. Project code imports
``ares_cli.toy.tiny_vl`` (``tests/test_architecture.py`` enforces it).
"""

from ares_cli.toy.tiny_vl import (  # noqa: F401
    IMAGE_BLOCK,
    VL_CHAT_TEMPLATE,
    VLShape,
    build_processor,
    build_tiny_vl,
    build_vl_tokenizer,
    mrope_section,
    save_tiny_vl,
    vl_config,
)
