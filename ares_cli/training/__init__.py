"""Training: cold-start SFT (:mod:`.sft`, :mod:`.sft_data`), checkpoints without pickle (:mod:`.checkpoint`)
and distributed glue for torchrun / DeepSpeed (:mod:`.distributed`). Heavy imports happen inside functions."""
