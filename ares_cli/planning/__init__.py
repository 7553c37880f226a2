"""``ares plan``: check a stage's run and size it before it takes a GPU.

- checks: the stage's own preparation (:mod:`ares_cli.stages.prepare_rl`, ``prepare_sft``,
  ``prepare_passrate``, ``prepare_eval``) through a collecting checklist, then :mod:`.data_checks`
  (tokenizer, images, gold answers against the grader, prompt lengths per source);
- shapes: :mod:`.shapes` reads ``config.json`` and safetensors headers, never weights;
- estimates (pure): :mod:`.memory` (activations, head, passes, KV cache), :mod:`.zero` (ZeRO stages via
  DeepSpeed's estimators), :mod:`.estimate_rl`, :mod:`.estimate_sft`, :mod:`.estimate_sampling`;
- :mod:`.suggest`: the smallest changes that fit; :mod:`.report`: the report, its exit code, rendering;
- per stage, the orchestration: :mod:`.plan_rl`, :mod:`.plan_sft`, :mod:`.plan_sampling`.

``docs/planning.md`` derives every term and compares the estimate with measured peaks.
"""
