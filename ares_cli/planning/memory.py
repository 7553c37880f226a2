"""Per-GPU memory of one training micro-step and of the no-grad and generation passes (pure functions).

Every function returns bytes from shapes; ``docs/planning.md`` derives each term. The activation terms
count, per decoder layer of a Llama/Qwen2-style model as transformers implements it (SDPA attention,
RMSNorm computed in float32, SwiGLU MLP), the tensors autograd keeps for backward, per token with
activations of ``b`` bytes and h / i / q / k = hidden / MLP / query / key-value widths:

- each RMSNorm: its float32 input (4h) and the normalised value and output in the activation dtype (2bh);
- attention: rotated queries, keys and values repeated to every head (a padding or packing mask stops
  SDPA's grouped-query path), the output and the projection's input (b(3q + 2q)), the float32
  log-sum-exp per head (4 x heads); plus the additive mask SDPA builds per layer, rows x seq^2 x b;
- the MLP: gate, SiLU(gate), up and their product (4bi).

The head (the last projection to the vocabulary) is separate: ``fused`` (the chunked token-statistics
pass of :mod:`ares_cli.algorithms.token_stats`) keeps the selected hidden states and, in backward, a
float32 [V x h] weight gradient; ``logits`` materialises [tokens x V] logits and their gradients.

Model states per GPU follow the configured ZeRO stage and precision (:func:`model_state_terms`). ZeRO-2 and
ZeRO-3 with bfloat16 use DeepSpeed's own estimators
(``deepspeed.runtime.zero.stage_1_and_2.estimate_zero2_model_states_mem_needs``,
``deepspeed.runtime.zero.stage3.estimate_zero3_model_states_mem_needs``): 2P + 18P/N and
4 x (largest layer) + 18P/N bytes for P trainable parameters over N GPUs (16-bit weights, 16- and 32-bit
gradients, 32-bit master weights and AdamW moments), with optimizer / parameter offload as configured.
Stages 0 and 1, and float32 training, have no DeepSpeed estimator; their formulas here count the same
buffers. Frozen parameters (a vision tower in SFT) hold only their 16-bit copy. Without DeepSpeed the
trainer keeps float32 weights, gradients and AdamW moments on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ares_cli.planning.shapes import ModelShape

WORK_BLOCK = 1 << 22  # float32 elements of one token-statistics work block (token_stats.BLOCK_ELEMS)
GIB = 1 << 30
VLLM_OVERHEAD = 2 * GIB  # CUDA graphs, sampler buffers, the profile run's activations (assumed)


@dataclass(frozen=True)
class Term:
    """One line of an estimate. ``basis``: ``exact`` (counted from shapes), ``estimate`` (a formula of
    this module, checked against measurement on CPU), ``deepspeed`` (DeepSpeed's own estimator),
    ``reserved`` (memory another engine takes), ``assumed`` (a stated allowance)."""

    name: str
    bytes: int
    basis: str
    how: str

    def to_json(self) -> dict:
        return {"name": self.name, "bytes": int(self.bytes), "gib": round(self.bytes / GIB, 3),
                "basis": self.basis, "how": self.how}  # fmt: skip


@dataclass(frozen=True)
class MicroBatch:
    """One forward/backward's shape: ``rows`` rows of ``seq`` positions (padded; one row when packed),
    ``keep`` positions per row reach the head, ``predicted`` tokens in all have a target."""

    rows: int
    seq: int
    keep: int
    predicted: int
    masked: bool = True  # an attention mask is passed (padding or packing)

    @property
    def tokens(self) -> int:
        return self.rows * self.seq


def layer_saved_per_token(shape: ModelShape, b: int, *, autocast: bool = False) -> int:
    """Bytes one decoder layer keeps for backward per token (see the module docstring).

    ``autocast`` (float32 weights under torch autocast): norms see float32 inputs, and each of the five
    projections reading a norm's output keeps its own bfloat16 cast of it."""
    h, i, q = shape.hidden, shape.intermediate, shape.q_width
    norm_b = 4 if autocast else b
    norms = 2 * (4 * h + 2 * norm_b * h) + (5 * 2 * h if autocast else 0)
    attention = b * (3 * q + 2 * q) + 4 * shape.heads
    return norms + attention + 4 * b * i


def mask_per_layer(mb: MicroBatch, b: int) -> int:
    """SDPA's additive mask, built (and kept for backward) by every layer: rows x seq^2 x b."""
    return mb.rows * mb.seq * mb.seq * b if mb.masked else 0


def trunk_saved(shape: ModelShape, mb: MicroBatch, b: int, *, checkpointing: bool, autocast: bool) -> int:
    """Bytes all layers keep for backward (with gradient checkpointing: each layer's input, plus one layer
    recomputed in full), the shared boolean mask and rotary tables, and the final norm."""
    n = mb.tokens
    per_layer = layer_saved_per_token(shape, b, autocast=autocast) * n + mask_per_layer(mb, b)
    layers = shape.layers * n * shape.hidden * b + per_layer if checkpointing else shape.layers * per_layer
    shared = (mb.rows * mb.seq * mb.seq if mb.masked else 0) + 2 * n * shape.head_dim * b
    final_norm = n * (4 * shape.hidden + 2 * b * shape.hidden)
    return layers + shared + final_norm


def layer_backward_transient(shape: ModelShape, mb: MicroBatch, b: int) -> int:
    """Gradients alive while one layer's MLP runs backward: those of its product, SiLU and up outputs."""
    return 3 * mb.tokens * shape.intermediate * b


def head_bytes(shape: ModelShape, mb: MicroBatch, b: int, *, path: str, chunk: int, loss: str) -> dict:
    """The head's ``saved`` bytes and its forward / backward ``transient`` bytes for one micro-batch.

    ``loss="stats"`` is the RL token-statistics pass; ``loss="ce"`` SFT's cross-entropy (fused: the same
    statistics pass; logits: ``F.cross_entropy`` over float32 logits)."""
    v, h = shape.vocab, shape.hidden
    keep = mb.rows * mb.keep
    work = 2 * max(1, min(chunk, WORK_BLOCK // max(v, 1))) * v * 4
    if path == "fused":
        chunk_logits = chunk * v * b + work
        weight_grad = 4 * v * h + (v * h * b if b < 4 else 0)  # float32 accumulator, then its cast
        hidden_grads = (mb.predicted + keep + mb.tokens) * h * b
        return {"saved": mb.predicted * (h * b + 20), "forward": chunk_logits,
                "backward": weight_grad + hidden_grads + chunk_logits}  # fmt: skip
    if loss == "ce":
        forward = keep * v * (b + (4 if b < 4 else 0) + 4)
        return {"saved": keep * v * 4, "forward": forward - keep * v * 4, "backward": 2 * keep * v * 4}
    # the slice's and the selection's logit gradients, then the weight gradient computed beside them
    return {"saved": mb.predicted * v * b, "forward": keep * v * b + work,
            "backward": 2 * keep * v * b - mb.predicted * v * b + v * h * b + work}  # fmt: skip


def embedding_grad_end(shape: ModelShape, grad_bytes: int) -> int:
    """At the end of backward the input embedding's dense gradient [V x h] appears; with tied embeddings
    autograd has held the head's weight gradient since the head's backward and sums the two (a third
    [V x h]) before they reach ``.grad``."""
    return (3 if shape.tied else 1) * shape.vocab * shape.hidden * grad_bytes


def update_terms(
    shape: ModelShape, mb: MicroBatch, b: int, *, path: str, chunk: int, loss: str, checkpointing: bool,
    autocast: bool = False, grad_bytes: int | None = None,
) -> list[Term]:  # fmt: skip
    """The activation terms of one forward + backward; their sum is the micro-step's activation peak: the
    larger of (everything saved + the largest temporary: head forward/backward or one MLP's backward) and
    the embedding-gradient sum at the end of backward, when activations are gone."""
    head = head_bytes(shape, mb, b, path=path, chunk=chunk, loss=loss)
    saved = trunk_saved(shape, mb, b, checkpointing=checkpointing, autocast=autocast)
    transient = max(head["forward"], head["backward"], layer_backward_transient(shape, mb, b))
    end = embedding_grad_end(shape, grad_bytes if grad_bytes is not None else b)
    peak_extra = max(transient, end - saved - head["saved"])
    how = ("largest of: head forward/backward temporaries, one MLP's backward gradients" if peak_extra == transient
           else f"end of backward: the embedding's gradient{' summed with the tied head' if shape.tied else ''}")  # fmt: skip
    what = f"{mb.rows} row(s) x {mb.seq} positions, {mb.predicted} predicted tokens, {8 * b}-bit"
    return [
        Term("activations", saved, "estimate",
             f"{shape.layers} layers{' (checkpointed)' if checkpointing else ''}, {what}"),
        Term(f"head ({path})", head["saved"], "estimate", f"kept for backward, vocabulary {shape.vocab}"),
        Term("backward peak", peak_extra, "estimate", how),
    ]  # fmt: skip


def nograd_pass_bytes(shape: ModelShape, mb: MicroBatch, b: int, *, path: str, chunk: int) -> int:
    """Peak of a no-grad forward (old policy, reference): one layer's largest temporaries, the residual
    stream, SDPA's mask, and the head (a chunk of logits when fused, all response logits otherwise)."""
    n, h = mb.tokens, shape.hidden
    layer = n * (max(3 * shape.intermediate * b, 5 * shape.q_width * b) + 2 * h * b + 8 * h)
    mask = mb.rows * mb.seq * mb.seq * (b + 1) if mb.masked else 0
    v, keep = shape.vocab, mb.rows * mb.keep
    work = 2 * max(1, min(chunk, WORK_BLOCK // max(v, 1))) * v * 4
    head = (chunk * v * b + mb.predicted * h * b) if path == "fused" else (keep + mb.predicted) * v * b
    return layer + mask + head + work


def vision_tower_bytes(shape: ModelShape, patches: int, b: int, *, grad: bool, checkpointing: bool) -> int:
    """The vision tower's activations over ``patches`` patches (``shape.vision``: width vh, MLP width vi,
    blocks, heads), per block as a decoder layer (norms, attention per image window, no mask; a SwiGLU MLP):
    with ``grad`` every block's saved tensors (checkpointed: each block's input + one block in full), else one
    block's largest temporaries and the residual stream."""
    vh, vi, depth, heads, _ = shape.vision
    if not patches or not depth:
        return 0
    block = 2 * (4 * vh + 2 * b * vh) + b * 5 * vh + 4 * heads + 4 * b * vi
    if not grad:
        return patches * (max(3 * vi * b, 5 * vh * b) + 2 * vh * b + 8 * vh)
    return patches * (depth * vh * b + block if checkpointing else depth * block)


def kv_cache_bytes(shape: ModelShape, sequences: int, length: int, b: int) -> int:
    """Keys and values of ``sequences`` sequences of ``length`` tokens in every layer."""
    return 2 * shape.layers * shape.kv_width * b * sequences * length


def torch_model_states(params: int, trainable: int, *, param_bytes: int = 4) -> list[Term]:
    """Plain torch (no DeepSpeed): weights, gradients and AdamW's two moments (in the weights' dtype) on
    every rank; the trainers keep float32 weights."""
    return [
        Term("parameters", params * param_bytes, "exact", f"{params:,} x {param_bytes} bytes"),
        Term("gradients", trainable * param_bytes, "exact", f"{trainable:,} trainable x {param_bytes} bytes"),
        Term("optimizer states", trainable * 2 * param_bytes, "exact", "AdamW exp_avg + exp_avg_sq"),
    ]


def optimizer_step_transient(trainable_shard: int) -> int:
    """torch AdamW (foreach) holds one float32 temporary per moment tensor it updates: sqrt(v) / c + eps."""
    return 4 * trainable_shard


def framework_allowance(tensor_peak: int) -> Term:
    """CUDA context, cuBLAS workspaces, NCCL buffers and caching-allocator fragmentation."""
    return Term("CUDA context + allocator slack", GIB + tensor_peak // 10, "assumed",
                "1 GiB context/workspaces/NCCL + 10% of the tensor peak for fragmentation")  # fmt: skip


def total(terms: list[Term]) -> int:
    return sum(t.bytes for t in terms)


# Weights, gradients and optimizer states per GPU under the configured ZeRO stage and precision.
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
