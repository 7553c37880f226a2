"""The embedded toy world: chained-arithmetic tasks, a slipping/verifying teacher, a char tokenizer, a tiny Llama.

Importing this package is cheap; torch and transformers load inside the functions that need them.
"""

from __future__ import annotations

from ares_cli.toy.build import BuildConfig, base_dir, build_base, build_config, prompt_messages
from ares_cli.toy.tasks import MAX_DIFFICULTY, SPLIT_SIZES, load_split, regenerate_splits, split_path
from ares_cli.toy.teacher import TeacherConfig, last_boxed_int, write_trace

__all__ = [
    "MAX_DIFFICULTY",
    "SPLIT_SIZES",
    "BuildConfig",
    "TeacherConfig",
    "base_dir",
    "build_base",
    "build_config",
    "last_boxed_int",
    "load_split",
    "prompt_messages",
    "regenerate_splits",
    "split_path",
    "write_trace",
]
