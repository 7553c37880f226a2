"""``ares plan``: check a stage's run and size it before it takes a GPU.

- per stage, the plan and its estimate: :mod:`.rl`, :mod:`.sft`, :mod:`.sampling` (passrate and eval);
  each runs the stage's own preparation (:mod:`ares_cli.stages.prepare_rl`, ``prepare_sft``,
  ``prepare_passrate``, ``prepare_eval``) through a collecting checklist, then the plan's own checks;
- :mod:`.input_checks`: the checks every stage's plan adds (model shapes, tokenizer, processor, images, gold
  answers against the grader, prompt lengths per source, the backend a GPU machine picks);
- :mod:`.shapes`: a model's shapes from ``config.json`` and safetensors headers, never weights;
- :mod:`.memory` (pure): activations, head, passes, KV cache, and model states under ZeRO (DeepSpeed's
  estimators);
- :mod:`.target`: the machine planned for (from the command line) and the verdict of an estimate on it;
- :mod:`.suggest`: the smallest changes that fit; :mod:`.report`: the report, its exit code, rendering.

``docs/planning.md`` derives every term and compares the estimate with measured peaks.
"""
