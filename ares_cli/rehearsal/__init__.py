"""The real-shape rehearsal kit, run by ``make rehearse-paec``, ``make rehearse-ares`` and ``ares toy twin``.

- :mod:`.twins`: shape twins, random-initialised models with a paper model's published configuration at
  reduced depth;
- :mod:`.qwen_tokenizer`: the real Qwen2.5 tokenizer built offline (the twins' tokenizer), with the chat
  templates and special tokens of :mod:`.qwen_chat`;
- :mod:`.stand_in_data`: small local stand-ins of the papers' datasets, shipped under ``data/``.

The embedded toy world (chained arithmetic, a tiny Llama) is :mod:`ares_cli.toy`; nothing here imports it.
Importing this package is cheap; torch and transformers load inside the functions that need them.
"""
