"""SFT data: records → chat-templated token ids with response-only labels → deterministic batches.

Accepted rows: a curate ``sft.jsonl`` record or any ``{prompt, response}`` (user = prompt, assistant =
response), or ``{messages: [{role, content}, ...]}``. The whole conversation is rendered once through the
tokenizer's chat template and tokenised with character offsets; a token is trained on (label = its id)
when it starts inside an assistant turn's span (content plus the template's end-of-turn text), else -100.

Batches: each optimiser step takes ``global_batch`` examples. ``length_grouped`` sorts a shuffled window of
examples by length so padding stays small; ``packed`` keeps the shuffled order and concatenates each
micro-batch's examples into one row with position ids restarting at 0 per example (transformers then
builds a block-diagonal causal mask, so examples never attend to each other). Both give the same loss.

Images (a vision-language model): a row's ``images`` (paths, relative ones against the data file) go into
its first user message as image parts, one placeholder each; after labelling, each placeholder token is
repeated as many times as the image has merged patches (never labelled). Pixel values are computed when a
micro-batch is collated, not kept in memory. Packing does not support images.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, InputErrors

IGNORE = -100
GROUP_WINDOW = 16  # global batches per length-sorting window


@dataclass
class Example:
    input_ids: list[int]
    labels: list[int]
    images: tuple[str, ...] = ()

    @property
    def n_response(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


ROLES = ("system", "user", "assistant")


def to_messages(
    row: dict[str, Any], *, file: Path | str | None = None, row_no: int | None = None
) -> list[dict]:
    """The chat messages of one data row (prompt/response or messages), or an InputError naming the row.

    A row with ``images`` gets them as image parts at the start of its first user message."""
    messages = _text_messages(row, file=file, row_no=row_no)
    n_images = len(row.get("images") or ())
    if n_images:
        user = next((m for m in messages if m["role"] == "user"), None)
        if user is None:
            raise InputError("images need a user message to attach to", file=file, row=row_no, field="images")
        user["content"] = [{"type": "image"}] * n_images + [{"type": "text", "text": user["content"]}]
    return messages


def _text_messages(row: dict[str, Any], *, file, row_no) -> list[dict]:
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise InputError("expected a non-empty list", file=file, row=row_no, field="messages")
        for i, msg in enumerate(messages):
            role = msg.get("role") if isinstance(msg, dict) else None
            if isinstance(msg, dict) and role is not None and role not in ROLES:
                raise InputError(
                    f"role {role!r} is not one of {', '.join(ROLES)} (a chat template renders only these)",
                    file=file, row=row_no, field=f"messages[{i}].role",
                )  # fmt: skip
            if not isinstance(msg, dict) or not isinstance(msg.get("content"), str) or "role" not in msg:
                raise InputError(
                    "each message needs 'role' and string 'content'", file=file, row=row_no, field="messages"
                )
        if not any(msg["role"] == "assistant" for msg in messages):
            raise InputError("no assistant message to train on", file=file, row=row_no, field="messages")
        return [{"role": msg["role"], "content": msg["content"]} for msg in messages]
    for name in ("prompt", "response"):
        if not isinstance(row.get(name), str):
            raise InputError(
                "missing or not a string (need prompt+response or messages)",
                file=file,
                row=row_no,
                field=name,
            )
    return [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["response"]}]


def _render(tokenizer, messages: list[dict], *, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )


def assistant_spans(tokenizer, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """The full rendered text and the character spans of each assistant turn (prefix renders must agree)."""
    full = _render(tokenizer, messages, add_generation_prompt=False)
    spans = []
    for k, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        start_text = _render(tokenizer, messages[:k], add_generation_prompt=True) if k else ""
        end_text = _render(tokenizer, messages[: k + 1], add_generation_prompt=False)
        if (
            not full.startswith(start_text)
            or not full.startswith(end_text)
            or len(end_text) < len(start_text)
        ):
            raise InputError(
                "the chat template does not render conversations prefix by prefix; "
                "cannot locate assistant turns"
            )
        spans.append((len(start_text), len(end_text)))
    return full, spans


def encode(
    tokenizer, messages: list[dict], max_seq_len: int, *, processor=None, images: tuple[str, ...] = ()
) -> tuple[Example, bool]:
    """Token ids and response-only labels for one conversation, truncated to ``max_seq_len``.

    With ``images`` (and their ``processor``) each image placeholder is expanded to the image's token count;
    a truncation that would cut into the image tokens raises an InputError."""
    text, spans = assistant_spans(processor or tokenizer, messages)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    labels = [
        tok if any(a <= start < b for a, b in spans) and end > start else IGNORE
        for tok, (start, end) in zip(ids, offsets, strict=True)
    ]
    if images:
        ids, labels = _expand_images(processor, ids, labels, images)
        if (
            len(ids) > max_seq_len
            and max(i for i, t in enumerate(ids) if t == processor.image_token_id) >= max_seq_len
        ):
            raise InputError(f"max_seq_len {max_seq_len} would cut into the image tokens", field="images")
    truncated = len(ids) > max_seq_len
    return Example(ids[:max_seq_len], labels[:max_seq_len], tuple(images)), truncated


def _expand_images(processor, ids: list[int], labels: list[int], images: tuple[str, ...]):
    from ares_cli.models.vision import encode_images, image_token_counts

    image_id = processor.image_token_id
    counts = image_token_counts(processor, encode_images(processor, images))
    if ids.count(image_id) != len(counts):
        raise InputError(
            f"the chat template wrote {ids.count(image_id)} image placeholder(s) for {len(counts)} image(s)",
            field="images",
        )
    out_ids, out_labels, k = [], [], 0
    for tok, label in zip(ids, labels, strict=True):
        if tok == image_id:
            out_ids += [image_id] * counts[k]
            out_labels += [IGNORE] * counts[k]
            k += 1
        else:
            out_ids.append(tok)
            out_labels.append(label)
    return out_ids, out_labels


def load_examples(
    path: Path, tokenizer, max_seq_len: int, *, processor=None
) -> tuple[list[Example], dict[str, int]]:
    """Read and encode a JSONL file; examples left with no response token are dropped (counted).

    Rows with images need the model's ``processor`` (a text-only model: InputError naming the row)."""
    from ares_cli.data.jsonl import parse_jsonl

    rows, errors = parse_jsonl(path)
    examples, counts = [], {"rows": len(rows), "truncated": 0, "dropped_no_response": 0}
    for row_no, row in rows:
        try:
            images = _row_images(row, path, row_no, processor)
            messages = to_messages(row, file=path, row_no=row_no)
            example, truncated = encode(tokenizer, messages, max_seq_len, processor=processor, images=images)
        except InputError as err:
            if err.row is None:
                message = str(err).removeprefix(f"field '{err.field}': ") if err.field else str(err)
                err = InputError(message, file=path, row=row_no, field=err.field)
            errors.append(err)
            continue
        counts["truncated"] += int(truncated)
        if example.n_response == 0:
            counts["dropped_no_response"] += 1
            continue
        examples.append(example)
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors)
    if not examples:
        raise InputError("no trainable examples (every row empty or truncated away)", file=path)
    return examples, counts


def _row_images(row: dict, path: Path, row_no: int, processor) -> tuple[str, ...]:
    from ares_cli.data.images import file_problems, resolve_images

    if not row.get("images"):
        return ()
    if processor is None:
        raise InputError("image rows need a vision-language model; this one is text-only", field="images")
    try:
        images = resolve_images(row["images"], Path(path).parent)
    except ValueError as exc:
        raise InputError(str(exc), field="images") from None
    problems = file_problems(images)
    if problems:
        raise InputError("; ".join(problems), field="images")
    return tuple(images)


# ---- batching ----------------------------------------------------------------------------------------
def epoch_batches(lengths: list[int], global_batch: int, seed: int, epoch: int, mode: str) -> list[list[int]]:
    """Example indices of every optimiser step of one epoch; deterministic in (seed, epoch).

    The last step of an epoch may hold fewer examples. ``length_grouped`` sorts each window of
    ``GROUP_WINDOW`` global batches by length (longest first) and then shuffles the step order.
    """
    import numpy as np

    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths)).tolist()
    if mode == "length_grouped":
        window = global_batch * GROUP_WINDOW
        order = [
            i
            for w in range(0, len(order), window)
            for i in sorted(order[w : w + window], key=lambda j: -lengths[j])
        ]
    batches = [order[b : b + global_batch] for b in range(0, len(order), global_batch)]
    if mode == "length_grouped" and len(batches) > 1:
        batches = [batches[i] for i in rng.permutation(len(batches)).tolist()]
    return batches


def micro_batches(step_indices: list[int], n_micro: int, rank: int, world_size: int) -> list[list[int]]:
    """This rank's micro-batches of one step: the step is cut into ``world_size * n_micro`` contiguous parts
    (balanced; a short last step may leave some empty) and rank r takes parts [r*n_micro, (r+1)*n_micro)."""
    parts, total = [], world_size * n_micro
    base, extra = divmod(len(step_indices), total)
    start = 0
    for p in range(total):
        size = base + (1 if p < extra else 0)
        parts.append(step_indices[start : start + size])
        start += size
    return parts[rank * n_micro : (rank + 1) * n_micro]


def collate(examples: list[Example], *, pad_id: int, packed: bool, processor=None) -> dict[str, Any]:
    """Tensors for one micro-batch: right-padded rows, or one packed row with per-example position ids.

    An empty micro-batch (short last step) becomes one pad token with no label, so every rank still runs
    the same number of forward/backward passes. With images, ``vision`` holds each row's
    :class:`~ares_cli.models.vision.VisionInputs` (None for a text row); the caller turns them into forward
    inputs (:func:`ares_cli.models.vision.forward_inputs`).
    """
    import torch

    if not examples:
        examples = [Example([pad_id], [IGNORE])]
    has_images = any(ex.images for ex in examples)
    if packed and has_images:
        from ares_cli.errors import UsageError

        raise UsageError("batching=packed does not support images; use length_grouped")
    if packed:
        ids = [t for ex in examples for t in ex.input_ids]
        labels = [t for ex in examples for t in _shift(ex.labels)]
        positions = [p for ex in examples for p in range(len(ex.input_ids))]
        return {
            "input_ids": torch.tensor([ids]),
            "labels": torch.tensor([labels]),
            "position_ids": torch.tensor([positions]),
        }
    width = max(len(ex.input_ids) for ex in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, ex in enumerate(examples):
        n = len(ex.input_ids)
        ids[row, :n] = torch.tensor(ex.input_ids)
        labels[row, :n] = torch.tensor(_shift(ex.labels))
        mask[row, :n] = 1
    batch: dict[str, Any] = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    if has_images:
        from ares_cli.models.vision import encode_images

        batch["vision"] = [encode_images(processor, ex.images) if ex.images else None for ex in examples]
    return batch


def _shift(labels: list[int]) -> list[int]:
    """Labels aligned with the logits that predict them: position t is scored on token t+1."""
    return labels[1:] + [IGNORE]
