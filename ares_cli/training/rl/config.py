"""``RLConfig``: every constant of the RL stage with its paper default; the ``--algo`` presets are declared
with the algorithms (:mod:`.registry`).

Precedence: dataclass defaults < preset of the algorithm < YAML (``--config``, or its ``rl:`` section)
< ``--set key=value`` < explicit flags. Names (``algo``, ``loss.policy_loss``, ``loss.advantage``,
``loss.aggregation``, ``kl.estimator``) must be registered, and a constant set by the user that the chosen
loss, estimator or algorithm does not read is refused (:func:`check_reads`): all of it when the config
resolves, before any data or model is loaded. Nested sections are addressed with dots (``--set aepo.window=4``,
``--set loss.clip_high=0.28``). Batch sizes count *prompts* (groups of G responses), as verl and EasyR1 do:
ARES's "512 prompts per step, global batch 128" is ``prompts_per_step=512, optim.mini_batch_size=128``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ares_cli.algorithms.advantages import ADVANTAGES, STD_KINDS
from ares_cli.algorithms.aepo import AEPOConfig
from ares_cli.algorithms.aer import AERConfig
from ares_cli.algorithms.kl import KL_ESTIMATORS
from ares_cli.algorithms.loss_aggregation import AGGREGATIONS
from ares_cli.algorithms.paec import PAECConfig
from ares_cli.algorithms.policy_loss_core import POLICY_LOSSES, PolicyLossConfig
from ares_cli.config import (
    load_yaml,
    option,
    parse_sets,
    refuse_command_line_only,
    resolve,
    seed_option,
    to_dict,
)
from ares_cli.errors import UsageError
from ares_cli.models.pixels import (
    MAX_PIXELS,
    MAX_PIXELS_HELP,
    MIN_PIXELS,
    MIN_PIXELS_HELP,
    check_pixel_bounds,
)
from ares_cli.training.rl.branching import BranchingConfig
from ares_cli.training.rl.registry import ALGORITHMS, PRESETS, check_reads

__all__ = [
    "RLConfig",
    "LossConfig",
    "LossNames",
    "PRESETS",
    "resolve_rl_config",
    "check_reads",
    "validate",
    "key_config",
]


@dataclass
class RolloutConfig:
    """Generation of the G responses per prompt."""

    prompts_per_step: int = option(
        512, "Prompts per RL step, all ranks together (ARES: 512; PAEC: 96).", ge=1
    )
    group_size: int = option(8, "G: responses sampled per prompt (ARES, PAEC: 8).", ge=2)
    temperature: float = option(
        1.0, "Sampling temperature; also the temperature of training log-probs (1.0).", gt=0.0
    )
    top_p: float = option(1.0, "Nucleus mass of rollouts (PAEC: 1.0; ARES: 0.99).", gt=0.0, le=1.0)
    max_new_tokens: int | None = option(
        None,
        "Response budget in tokens; unset = the model's generation_config.json max_new_tokens, else "
        "ARES's 16k (PAEC: 3072).",
        ge=1,
    )
    max_prompt_tokens: int = option(
        4096, "Longer prompts are dropped from the data (ARES: 4k; PAEC: 512).", ge=1
    )
    backend: Literal["auto", "hf", "vllm"] = option("auto", "auto = vllm with a GPU when installed, else hf.")
    batch_size: int = option(64, "Rows per decode batch of the hf backend.", ge=1)
    vllm_gpu_memory_utilization: float = option(
        0.5, "GPU memory fraction vLLM may take beside the trainer.", gt=0.0, le=1.0
    )
    tensor_parallel_size: int = option(
        1, "vllm: ranks sharing one engine (tensor parallel; TRL, EasyR1: 1); must divide the ranks.", ge=1
    )
    sleep_mode: Literal["auto", "on", "off"] = option(
        "auto", "vllm: sleep the engine during the update, wake it (weights, then KV cache) around the sync; "
        "auto = on with a GPU (TRL, verl, EasyR1, OpenRLHF sleep).",
    )  # fmt: skip
    per_sample_seeds: bool = option(
        False, "vllm: one n=1 request per sample with its own seed (reproducible per sample, slower); "
        "off = one n=G request per prompt (docs/performance.md).",
    )  # fmt: skip
    system_prompt: str | None = option(None, "Optional system message of every prompt.")
    prompt_template: str | None = option(
        None, "User-message format string with {problem}; None = the problem."
    )
    branching: BranchingConfig = option(
        BranchingConfig(), "Entropy-triggered branching of rollouts (ARES sec. 3.2.1); off by default."
    )
    min_pixels: int = option(MIN_PIXELS, MIN_PIXELS_HELP, ge=1)
    max_pixels: int = option(MAX_PIXELS, MAX_PIXELS_HELP, ge=1)

    def check(self) -> None:
        """The image resize bounds are ordered."""
        check_pixel_bounds(self.min_pixels, self.max_pixels, "rollout.")


@dataclass
class OptimConfig:
    """AdamW and the PPO update schedule."""

    lr: float = option(1e-6, "AdamW learning rate (ARES, PAEC: 1e-6).", gt=0.0)
    weight_decay: float = option(1e-2, "AdamW weight decay on matrices (ARES: 1e-2).", ge=0.0)
    warmup_steps: int = option(0, "Linear warmup in optimiser steps (ARES: none); constant afterwards.", ge=0)
    adam_beta1: float = option(0.9, "AdamW beta1.", ge=0.0, lt=1.0)
    adam_beta2: float = option(0.999, "AdamW beta2.", ge=0.0, lt=1.0)
    adam_eps: float = option(1e-8, "AdamW epsilon.", gt=0.0)
    grad_clip: float = option(1.0, "Clip the global gradient norm (0 = off; verl's default 1.0).", ge=0.0)
    ppo_epochs: int = option(1, "Passes over each RL step's batch (GRPO/DAPO/ARES: 1).", ge=1)
    mini_batch_size: int = option(128, "Prompts per optimiser step, all ranks (ARES: 128; PAEC: 24).", ge=1)
    micro_batch_size: int = option(
        4, "Sequences per forward/backward on one rank when max_tokens_per_micro_batch is null.", ge=1
    )
    max_tokens_per_micro_batch: int | Literal["auto"] | None = option(
        "auto",
        "Token budget per forward/backward (rows sorted by length); auto = 2048 on CPU, max(2048, "
        "micro_batch_size x the longest row) on GPU, rows for Clip-Cov/KL-Cov/80-20; null = micro_batch_size rows.",
    )
    pack_sequences: bool = option(False, "Concatenate each micro-batch's sequences into one unpadded row.")
    stats_path: Literal["fused", "logits"] = option(
        "fused", "Token statistics from hidden states in chunks (fused) or from full response logits."
    )
    dtype: Literal["auto", "fp32", "bf16"] = option("auto", "auto = bf16 on GPU, fp32 on CPU.")
    gradient_checkpointing: bool = option(False, "Recompute activations in backward (memory for time).")
    deepspeed: str | None = option(
        None, "DeepSpeed ZeRO config (pipelines/deepspeed/zero2.json); None = torch."
    )


@dataclass(frozen=True)
class LossNames:
    """The loss section's names: which policy loss, advantage estimator and aggregation (registered names)."""

    policy_loss: str = option(
        "ppo", "Policy loss (ares_cli.algorithms.policy_losses).", choices=POLICY_LOSSES
    )
    advantage: str = option(
        "grpo", "Advantage estimator (ares_cli.algorithms.advantages).", choices=ADVANTAGES
    )
    adv_std: str = option(
        "unbiased", "Group std of the advantages (unbiased: torch.std, TRL, verl).", choices=STD_KINDS
    )
    adv_eps: float = option(1e-6, "Epsilon of the advantage std division (verl 1e-6; TRL 1e-4).")
    aggregation: str = option(
        "seq_mean_token_mean",
        "Loss aggregation (GRPO seq-mean-token-mean; DAPO token_mean; Dr.GRPO seq_sum_constant).",
        choices=AGGREGATIONS,
    )


@dataclass(frozen=True)
class LossConfig(PolicyLossConfig, LossNames):
    """Policy loss, advantages, aggregation: the names (:class:`LossNames`, listed first) and every loss
    constant. This section *is* the algorithm library's
    :class:`~ares_cli.algorithms.policy_loss_core.PolicyLossConfig` (where each constant is declared, once),
    and the losses receive it as it is."""

    chunk_size: int = option(128, "Positions per chunk of the token-statistics pass (memory).")


@dataclass
class KLConfig:
    """KL to the frozen initial policy, as a loss term (ARES eq. 2)."""

    coef: float = option(0.001, "KL loss coefficient (verl default 1e-3; 0 = no reference model).", ge=0.0)
    reference: Literal["auto", "device", "cpu", "zero3"] = option(
        "auto", "Where the reference model lives: device (whole, every rank), cpu (moved to the device for "
        "its pass only), zero3 (sharded, its own DeepSpeed engine); auto = zero3 under a ZeRO-3 policy, else "
        "device.",
    )  # fmt: skip
    estimator: str = option("k3", "KL estimator (k3 = low-variance, Schulman 2020).", choices=KL_ESTIMATORS)
    clamp: float | None = option(
        10.0, "Clamp of the per-token k3 estimate (verl 10; k1, k2 unclamped; null = none, TRL).", gt=0.0
    )
    log_ratio_clamp: float | None = option(
        20.0, "Clamp of k3's log-ratio before exp (verl 20; null = none, TRL).", gt=0.0
    )


@dataclass
class RewardConfig:
    """Outcome reward: accuracy, optional format term, DAPO overlong shaping."""

    correct: float = option(1.0, "Reward of a correct answer.")
    incorrect: float = option(0.0, "Reward of an incorrect (or ungradable) answer.")
    format_penalty: float = option(0.0, "Subtracted when the response has no \\boxed{} answer (0 = off).")
    format_reward: float = option(
        0.0, "Added when the response has a \\boxed{} answer (PAEC app. B.2: 0.05).", ge=0.0
    )
    overlong_shaping: bool = option(False, "DAPO soft overlong punishment (dapo preset: on).")
    overlong_buffer: int = option(
        4096, "DAPO L_cache: penalty ramps over the last N tokens of the budget.", ge=1
    )
    overlong_penalty: float = option(1.0, "Penalty at the full budget (DAPO: 1).")


@dataclass
class FilterConfig:
    """Dynamic sampling (DAPO) / online filtering (ARES appendix A)."""

    mode: Literal["off", "filter"] = option(
        "off", "filter: drop groups with equal rewards or mean out of band."
    )
    low: float = option(0.01, "Keep groups whose mean accuracy is >= low (ARES: 0.01).", ge=0.0, le=1.0)
    high: float = option(0.99, "Keep groups whose mean accuracy is <= high (ARES: 0.99).", ge=0.0, le=1.0)
    max_extra_rounds: int = option(
        10, "Extra generation rounds before failing (DAPO max_num_gen_batches).", ge=0
    )


@dataclass
class ValConfig:
    """Validation on a held-out split (--val-data)."""

    every: int = option(10, "Validate every N steps (PAEC: 10; 0 = only before and after training).", ge=0)
    temperature: float = option(0.0, "Validation temperature (0 = greedy).", ge=0.0)
    top_p: float = option(1.0, "Validation nucleus mass.", gt=0.0, le=1.0)
    k: int = option(1, "Samples per validation problem (accuracy = mean over them).", ge=1, le=4096)
    max_new_tokens: int | None = option(None, "Validation budget; None = the rollout budget.", ge=1)
    limit: int | None = option(None, "Only the first N validation problems.", ge=1)
    select_by: Literal["last", "accuracy", "pass_at_k"] = option(
        "last", "Output model: the last step's, or the best validated one by mean accuracy / pass@k (PAEC)."
    )


@dataclass
class GradingConfig:
    grader: str = option("math_verify", "Grader name (or module:function with trust_grader_code).")
    trust_grader_code: bool = option(
        False, "Allow a module:function grader: import and run that module (command line only).",
        command_line_only="--trust-grader-code",
    )  # fmt: skip
    workers: int = option(
        2,
        "Grading worker processes of the run, split across its ranks (each rank at least one).",
        ge=1,
        le=256,
    )
    timeout_s: float = option(10.0, "Hard per-response grading timeout (the worker is killed).", gt=0.0)
    overlap: bool = option(
        True, "Grade each finished decode batch in the background while the next one decodes (hf backend).",
    )  # fmt: skip
    max_error_rate: float = option(
        0.1, "Stop when the grader fails (grade 'error') on more than this share of the responses so far.",
        ge=0.0, le=1.0,
    )  # fmt: skip

    def check(self) -> None:
        """The grader must resolve before any rollout (a module path only with ``trust_grader_code``)."""
        from ares_cli.grading.registry import resolve_grader

        resolve_grader(self.grader, trust_code=self.trust_grader_code)


@dataclass
class RLConfig:
    """The RL stage: algorithm, rollout, optimisation, loss, KL, rewards, filtering, validation."""

    algo: str = option("grpo", "Algorithm and its preset (the presets' table below).", choices=ALGORITHMS)
    steps: int = option(720, "RL steps (PAEC: 720).", ge=1)
    seed: int = seed_option(0, "Seed of the prompt order, rollout seeds and every other random choice.")
    save_every: int = option(
        10, "Checkpoint every N steps (PAEC: 10; 0 = never); the last two are kept.", ge=0
    )
    max_steps_this_run: int | None = option(
        None, "Stop (checkpointed) after this step; rerun resumes. Not keyed.", ge=1
    )
    data_limit: int | None = option(None, "Only the first N training problems.", ge=1)
    skip_invalid_rows: bool = option(
        False, "Drop the datasets' invalid rows (each listed in the artifact's stats) instead of failing."
    )
    rollout: RolloutConfig = option(RolloutConfig(), "Generation settings.")
    optim: OptimConfig = option(OptimConfig(), "Optimiser and PPO schedule.")
    loss: LossConfig = option(LossConfig(), "Policy loss, advantages, aggregation.")
    kl: KLConfig = option(KLConfig(), "KL loss to the reference model.")
    reward: RewardConfig = option(RewardConfig(), "Outcome reward.")
    filter: FilterConfig = option(FilterConfig(), "Dynamic sampling.")
    val: ValConfig = option(ValConfig(), "Validation.")
    grading: GradingConfig = option(GradingConfig(), "Grading.")
    aepo: AEPOConfig = option(AEPOConfig(), "AEPO constants (ares_cli.algorithms.aepo.AEPOConfig).")
    paec: PAECConfig = option(PAECConfig(), "PAEC constants (ares_cli.algorithms.paec.PAECConfig).")
    aer: AERConfig = option(
        AERConfig(), "AER constants (ares_cli.algorithms.aer.AERConfig; a reconstruction)."
    )


UNKEYED = ("max_steps_this_run",)
RL_BUDGET = 16384  # ARES's response budget, when neither the user nor the model sets one


def resolve_rollout_budget(cfg: RLConfig, model_path, window: int | None):
    """Set ``cfg.rollout.max_new_tokens`` (the user's, else the model's generation_config.json, else
    :data:`RL_BUDGET`), check it and any validation budget against the model's ``window``-token context
    (exit 2) and the cross-field rules; returns the :class:`~ares_cli.models.budget.Budget`."""
    from ares_cli.models.budget import Budget, check_fits, resolve_budget

    budget = resolve_budget(cfg.rollout.max_new_tokens, model_path, RL_BUDGET)
    check_fits(budget, window, flag="--set rollout.max_new_tokens=N")
    if cfg.val.max_new_tokens is not None:
        check_fits(Budget(cfg.val.max_new_tokens, "config"), window, flag="--set val.max_new_tokens=N")
    cfg.rollout.max_new_tokens = budget.max_new_tokens
    validate(cfg)
    return budget


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        if value is None:
            continue
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def resolve_rl_config(
    *, yaml_path=None, sets: list[str] | None = None, flags: dict[str, Any] | None = None
) -> RLConfig:
    """defaults < preset(algo) < YAML < --set < flags; the algorithm may come from any of the three."""
    layers = [load_yaml(yaml_path, section="rl"), parse_sets(sets or []), _nest(flags or {})]
    refuse_command_line_only(RLConfig, layers[0], str(yaml_path))
    algo = next((layer["algo"] for layer in reversed(layers) if layer.get("algo") is not None), "grpo")
    merged: dict[str, Any] = dict(ALGORITHMS.entry(str(algo)).preset)
    for layer in layers:
        merged = _merge(merged, layer)
    cfg = resolve(RLConfig, flags={**merged, "algo": algo})
    check_reads(cfg, layers)
    validate(cfg)
    return cfg


def validate(cfg: RLConfig) -> None:
    """Cross-field checks that a single field's type cannot express."""
    r, o = cfg.rollout, cfg.optim
    if r.group_size < 2:
        raise UsageError("rollout.group_size must be >= 2 (group-relative advantages)")
    if r.prompts_per_step % o.mini_batch_size:
        raise UsageError(
            f"rollout.prompts_per_step {r.prompts_per_step} is not a multiple of "
            f"optim.mini_batch_size {o.mini_batch_size}"
        )
    if isinstance(o.max_tokens_per_micro_batch, int) and o.max_tokens_per_micro_batch < 1:
        raise UsageError("optim.max_tokens_per_micro_batch must be >= 1, auto, or null for a row count")
    if min(o.micro_batch_size, o.ppo_epochs, cfg.steps, r.max_new_tokens or 1) < 1:
        raise UsageError("micro_batch_size, ppo_epochs, steps and max_new_tokens must be >= 1")
    if not 0.0 <= cfg.filter.low <= cfg.filter.high <= 1.0:
        raise UsageError("need 0 <= filter.low <= filter.high <= 1")
    if r.tensor_parallel_size > 1 and r.backend == "hf":
        raise UsageError(
            "rollout.tensor_parallel_size > 1 needs the vllm backend (hf samples from the policy)"
        )
    if cfg.kl.reference == "zero3" and not o.deepspeed:
        raise UsageError("kl.reference=zero3 needs a DeepSpeed ZeRO-3 config (optim.deepspeed)")
    if r.branching.enabled and o.deepspeed:
        raise UsageError("rollout.branching needs the torch optimiser path (unset optim.deepspeed): branched "
                         "groups vary in size, DeepSpeed's gradient accumulation count is fixed")  # fmt: skip
    budget = r.max_new_tokens  # None until the stage resolves it from the model (validate runs again then)
    if cfg.reward.overlong_shaping and budget is not None and not 0 < cfg.reward.overlong_buffer <= budget:
        raise UsageError("reward.overlong_buffer must lie in (0, rollout.max_new_tokens]")


def key_config(cfg: RLConfig) -> dict[str, Any]:
    """The config as it keys the artifact (stop-and-resume hooks excluded)."""
    return {k: v for k, v in to_dict(cfg).items() if k not in UNKEYED}
