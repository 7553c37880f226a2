"""The SFT stage's preparation: everything ``ares sft`` checks before it opens its artifact or loads weights.

Config, the global batch against micro-batch x ranks, the DeepSpeed file (filled for the planned ranks and
validated by DeepSpeed's parser), the model directory, the sequence length against its context, the data (a curate artifact's ``sft.jsonl`` or any
chat JSONL: every row encoded through the chat template, so a malformed row is found here, named by file
and row) and its images. ``ares sft`` runs these steps strictly, ``ares plan sft`` collecting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError
from ares_cli.stages.checklist import Checklist


@dataclass
class PreparedSFT:
    """What the preparation found; fields are None where their step failed (plan only)."""

    cfg: Any = None
    model_path: str | None = None
    data_path: Path | None = None
    deepspeed: dict[str, Any] | None = None
    zero: dict[str, Any] | None = None
    accumulation: int | None = None  # micro-batches per optimiser step on one rank
    lengths: list[int] | None = None  # tokens per encoded example
    response_tokens: list[int] | None = None  # labelled tokens per example
    counts: dict[str, int] | None = None  # rows, truncated, dropped_no_response
    seq_len_source: str | None = None  # where max_seq_len came from (models.budget.resolve_seq_len)
    refs: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1

    @property
    def inputs(self) -> list:
        """The stage's inputs in their keyed order: model, data, deepspeed, images."""
        return [self.refs[k] for k in ("model", "data", "deepspeed", "images") if self.refs.get(k)]


def resolve_data(store, ref: str):
    """(JSONL path, InputRef) for a JSONL file or a curate artifact id (its ``sft.jsonl``)."""
    ref_obj = store.input_ref("data", ref)
    if ref_obj.artifact_id is None:
        return Path(ref_obj.path), ref_obj
    path = Path(ref_obj.path) / "sft.jsonl"
    if not path.is_file():
        raise InputError(f"artifact {ref_obj.artifact_id} has no sft.jsonl")
    return path, ref_obj


def encode_examples(data_path: Path, model_path: str, cfg):
    """The examples the trainer would train on (tokenizer + chat template; every row validated)."""
    from ares_cli.models import load_processor, load_tokenizer
    from ares_cli.training.sft_data import load_examples

    tokenizer = load_tokenizer(model_path)
    processor = load_processor(model_path, min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels)
    return load_examples(data_path, tokenizer, cfg.max_seq_len, processor=processor)


def prepare_sft(
    store,
    *,
    model: str,
    data: str,
    yaml_path: Path | None,
    sets: list[str] | None,
    flags: dict[str, Any],
    world_size: int,
    on_gpu: bool,
    checks: Checklist | None = None,
    hash_inputs: bool = True,
    encode: bool = True,
) -> PreparedSFT:
    """Run the SFT stage's checks for ``world_size`` ranks; ``encode`` also encodes every example."""
    from dataclasses import replace

    from ares_cli.config import resolve
    from ares_cli.models.budget import model_context, resolve_seq_len
    from ares_cli.stages.inputs import resolve_model
    from ares_cli.training.sft import SFTConfig
    from ares_cli.training.sft_setup import accumulation_steps

    checks = checks or Checklist()
    out = PreparedSFT(world_size=world_size)
    cfg = out.cfg = checks.run("config", lambda: resolve(SFTConfig, yaml_path=yaml_path, sets=sets or [],
                               section="sft", flags=flags), lambda c: f"{c.epochs} epochs, batch {c.batch_size}")  # fmt: skip
    if cfg is not None:
        out.accumulation = checks.run("ranks", lambda: accumulation_steps(cfg, world_size),
                                      lambda n: f"{world_size} rank(s) x {n} micro-batch(es) x {cfg.micro_batch_size}")  # fmt: skip
        if cfg.deepspeed and out.accumulation is not None:
            out.zero = checks.run("deepspeed config", lambda: _deepspeed(store, cfg, out, on_gpu, hash_inputs),
                                  lambda z: f"ZeRO stage {z['stage']}")  # fmt: skip
    resolved = checks.run("model", lambda: resolve_model(store, model, hash_files=hash_inputs),
                          lambda r: str(r[0]))  # fmt: skip
    if resolved is not None:
        out.model_path, out.refs["model"] = resolved
    if cfg is not None and out.model_path is not None:
        seq = checks.run("sequence length", lambda: resolve_seq_len(cfg.max_seq_len, model_context(out.model_path)),
                         lambda r: f"max_seq_len {r[0]} ({r[1]})")  # fmt: skip
        if seq is not None:
            cfg = out.cfg = replace(cfg, max_seq_len=seq[0])
            out.seq_len_source = seq[1]
        else:
            cfg = None  # examples cannot be encoded without a length
    found = checks.run("data", lambda: resolve_data(store, data), lambda r: str(r[0]))
    if found is not None:
        out.data_path, out.refs["data"] = found
    if out.data_path is not None and out.model_path is not None:
        out.refs["images"] = checks.run("images vs model", lambda: _images(out.data_path, out.model_path))
        if encode and cfg is not None:
            encoded = checks.run("examples", lambda: encode_examples(out.data_path, out.model_path, cfg),
                                 lambda e: f"{len(e[0])} examples, {e[1]['truncated']} truncated")  # fmt: skip
            if encoded is not None:
                examples, out.counts = encoded
                out.lengths = [len(ex.input_ids) for ex in examples]
                out.response_tokens = [ex.n_response for ex in examples]
    return out


def _images(data_path: Path, model_path: str):
    """The images' InputRef (None without images); a text-only model given image rows: exit 3."""
    from ares_cli.data.images import images_input_ref
    from ares_cli.data.jsonl import parse_jsonl
    from ares_cli.models import check_image_support

    image_ref = images_input_ref(data_path)
    if image_ref is not None:
        rows = parse_jsonl(data_path)[0]
        check_image_support([r for _, r in rows], [(str(data_path), n) for n, _ in rows], model_path)
    return image_ref


def _deepspeed(store, cfg, out: PreparedSFT, on_gpu: bool, hash_inputs: bool) -> dict:
    from ares_cli.stages.inputs import deepspeed_config_ref
    from ares_cli.training import distributed
    from ares_cli.training.offload import with_client_optimizer

    out.refs["deepspeed"] = deepspeed_config_ref(store, cfg.deepspeed, hash_file=hash_inputs)
    bf16 = cfg.dtype == "bf16" or (cfg.dtype == "auto" and on_gpu)
    out.deepspeed = distributed.deepspeed_config(cfg.deepspeed, micro_batch=cfg.micro_batch_size,
                                                 grad_accum=out.accumulation, world_size=out.world_size,
                                                 grad_clip=cfg.grad_clip, bf16=bf16)  # fmt: skip
    out.deepspeed = with_client_optimizer(out.deepspeed, cfg.deepspeed)
    return distributed.check_deepspeed_config(out.deepspeed, cfg.deepspeed)
