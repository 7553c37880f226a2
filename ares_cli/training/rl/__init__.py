"""The RL trainer: GRPO-family baselines, DAPO, AEPO and PAEC behind one hook interface.

- :mod:`.config`   ``RLConfig`` (every constant with its paper default) and the per-``--algo`` presets;
- :mod:`.rewards`  accuracy / format rewards, DAPO overlong shaping, dynamic-sampling filter (pure);
- :mod:`.rollout`  prompt sampling, generation, grading and the cross-rank exchange of groups;
- :mod:`.batch`    padding into a batch and the one token-statistics forward per micro-batch;
- :mod:`.algos`    the ``Algorithm`` hook interface (the configuration-only baselines); AEPO, PAEC and AER
  in :mod:`.algos_aepo`, :mod:`.algos_paec`, :mod:`.algos_aer`; :mod:`.registry` names them all (imports run one way);
- :mod:`.state`    checkpoints, resume and metric rows;
- :mod:`.trainer`  the loop, readable top to bottom.
"""
