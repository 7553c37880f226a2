"""Parameters, gradients and optimizer states per GPU under the configured ZeRO stage and precision.

ZeRO-2 and ZeRO-3 with bfloat16 use DeepSpeed's own estimators
(``deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs``,
``deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs``): 2P + 18P/N and
4 x (largest layer) + 18P/N bytes for P trainable parameters over N GPUs (16-bit weights, 16- and 32-bit
gradients, 32-bit master weights and AdamW moments), with optimizer / parameter offload as configured.
Stages 0 and 1, and float32 training, have no DeepSpeed estimator; their formulas here count the same
buffers. Frozen parameters (a vision tower in SFT) hold only their 16-bit copy. Without DeepSpeed the
trainer keeps float32 weights, gradients and AdamW moments on every rank.
"""

from __future__ import annotations

from ares_cli.planning.memory import Term, torch_model_states
from ares_cli.planning.shapes import ModelShape


def _deepspeed_estimators():
    try:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as zero3
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as zero2
    except ImportError:
        return None
    return zero2, zero3


def zero_formula(stage: int, trainable: int, largest: int, world: int, *, bf16: bool,
                 offload_optimizer: bool = False, offload_param: bool = False) -> int:  # fmt: skip
    """Bytes per GPU of weights, gradients and AdamW states (DeepSpeed's estimator formulas for stages 2/3
    with 16-bit weights; the same accounting for stages 0/1 and float32)."""
    p, n = trainable, world
    if not bf16:  # float32 weights are their own master copy
        if stage == 3:
            return (
                4 * largest + (0 if offload_param else 4 * p // n) + (0 if offload_optimizer else 12 * p // n)
            )
        grads = 4 * p if stage < 2 else 4 * p // n
        states = 8 * p if stage == 0 else (0 if offload_optimizer else 8 * p // n)
        return 4 * p + grads + states
    if stage == 3:
        if offload_optimizer:
            return 4 * largest + (0 if offload_param else 2 * p // n)
        return 4 * largest + 18 * p // n
    if stage == 2:
        return 2 * p if offload_optimizer else 2 * p + 18 * p // n
    if stage == 1:  # 16-bit weights and full 16-bit gradients; 32-bit gradient, master and moments sharded
        return 4 * p + (0 if offload_optimizer else 16 * p // n)
    return 20 * p  # stage 0 with bf16: 16-bit weights + gradients, 32-bit master, gradients, moments


def model_state_terms(
    shape: ModelShape, *, trainable: int, zero: dict | None, world: int, gpus_per_node: int, nodes: int,
    bf16: bool,
) -> list[Term]:  # fmt: skip
    """The model-state terms of one rank. ``zero`` is None without DeepSpeed (plain torch, float32)."""
    frozen = shape.params - trainable
    if zero is None:
        return torch_model_states(shape.params, trainable)
    stage = zero["stage"]
    off_opt, off_par = zero["offload_optimizer"] != "none", zero["offload_param"] != "none"
    formula = zero_formula(stage, trainable, shape.largest_module_params, world, bf16=bf16,
                           offload_optimizer=off_opt, offload_param=off_par)  # fmt: skip
    name = f"weights + gradients + AdamW (ZeRO-{stage}{', optimizer offloaded' if off_opt else ''})"
    estimators = _deepspeed_estimators() if bf16 and stage in (2, 3) else None
    if estimators is not None:
        zero2, zero3 = estimators
        if stage == 2:
            gpu = zero2(trainable, num_gpus_per_node=gpus_per_node, num_nodes=nodes, cpu_offload=off_opt)[1]
            how = "DeepSpeed estimate_zero2_model_states_mem_needs: 2P + 18P/N"
        else:
            gpu = zero3(trainable, shape.largest_module_params, num_gpus_per_node=gpus_per_node, num_nodes=nodes,
                        cpu_offload=off_opt, cpu_offload_params=off_par)[1]  # fmt: skip
            how = "DeepSpeed estimate_zero3_model_states_mem_needs: 4 x largest layer + 18P/N"
        terms = [Term(name, int(gpu), "deepspeed", f"{how}, P = {trainable:,}, N = {world}")]
    else:
        terms = [Term(name, formula, "exact", f"ZeRO-{stage} accounting ({'bf16' if bf16 else 'fp32'}), "
                      f"P = {trainable:,}, N = {world}")]  # fmt: skip
    if frozen:
        share = world if stage == 3 else 1
        terms.append(Term("frozen weights", frozen * (2 if bf16 else 4) // share, "exact",
                          f"{frozen:,} frozen parameters, no gradient or optimizer state"))  # fmt: skip
    terms.append(bucket_term(zero, bf16))
    return terms


def bucket_term(zero: dict, bf16: bool) -> Term:
    """DeepSpeed's communication buffers: the gradient reduce bucket (twice with ``overlap_comm``), and
    under ZeRO-3 the parameter prefetch bucket, in the gradient dtype."""
    b = 2 if bf16 else 4
    reduce = zero["reduce_bucket_size"] * b * (2 if zero["overlap_comm"] else 1)
    prefetch = zero["prefetch_bucket_size"] * b if zero["stage"] == 3 else 0
    what = "reduce bucket" + (" x 2 (overlap_comm)" if zero["overlap_comm"] else "")
    return Term("DeepSpeed buckets", reduce + prefetch, "estimate",
                f"{what}{' + prefetch bucket' if prefetch else ''}, elements x {b} bytes")  # fmt: skip
