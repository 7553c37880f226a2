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
"""

from __future__ import annotations

from dataclasses import dataclass

from ares_cli.planning.shapes import ModelShape

WORK_BLOCK = 1 << 22  # float32 elements of one token-statistics work block (token_stats.BLOCK_ELEMS)
GIB = 1 << 30


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
