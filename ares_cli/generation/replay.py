"""`replay` backend: fixed completions from a JSONL file, keyed by (problem_id, sample_idx)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, UsageError
from ares_cli.generation.types import FINISH_REASONS, Completion, GenerationRequest, SamplingParams


def _int_field(obj: dict, name: str, path: Path, row: int, *, required: bool) -> int | None:
    value = obj.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"expected a non-negative integer, got {value!r}", file=path, row=row, field=name)
    return value


def load_replay(path: str | Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Parse a replay file into {(problem_id, sample_idx): row}; rows are numbered from 1."""
    path = Path(path)
    if not path.is_file():
        raise InputError("replay file not found", file=path)
    table: dict[tuple[str, int], dict[str, Any]] = {}
    with path.open(encoding="utf-8") as fh:
        for row, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"not valid JSON ({e.msg})", file=path, row=row) from e
            if not isinstance(obj, dict):
                raise InputError("expected a JSON object", file=path, row=row)
            pid = obj.get("problem_id")
            if isinstance(pid, int) and not isinstance(pid, bool):
                pid = str(pid)
            if not isinstance(pid, str) or not pid:
                raise InputError(
                    f"expected a non-empty string, got {pid!r}", file=path, row=row, field="problem_id"
                )
            idx = _int_field(obj, "sample_idx", path, row, required=True)
            if not isinstance(obj.get("response"), str):
                raise InputError("expected a string", file=path, row=row, field="response")
            reason = obj.get("finish_reason", "stop")
            if reason not in FINISH_REASONS:
                raise InputError(
                    f"expected one of {FINISH_REASONS}, got {reason!r}",
                    file=path,
                    row=row,
                    field="finish_reason",
                )
            n_tokens = _int_field(obj, "n_tokens", path, row, required=False)
            key = (pid, idx)
            if key in table:
                raise InputError(
                    f"duplicate (problem_id, sample_idx) {key!r} (first at row {table[key]['row']})",
                    file=path,
                    row=row,
                )
            table[key] = {
                "response": obj["response"],
                "finish_reason": reason,
                "n_tokens": n_tokens,
                "row": row,
            }
    return table


class ReplayBackend:
    """Serve completions recorded in a JSONL file of `{problem_id, sample_idx, response, finish_reason?, n_tokens?}`.

    A request's key is the problem id and the sample index is the seed's position in `request.seeds`.
    With a `tokenizer` the responses are tokenized (so `token_ids` are real); otherwise `token_ids` is empty
    and `n_tokens` comes from the file's `n_tokens` field when present.
    """

    name = "replay"

    def __init__(self, path: str | Path | None = None, *, tokenizer: Any = None):
        if path is None:
            raise UsageError("the replay backend needs a completions file (JSONL)")
        self.path = Path(path)
        self.rows = load_replay(self.path)
        if isinstance(tokenizer, (str, Path)):
            from ares_cli.models import load_tokenizer

            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer = tokenizer

    def generate(self, requests: list[GenerationRequest], sampling: SamplingParams) -> list[list[Completion]]:
        """Per request, the recorded completions for sample indices 0..n-1 (sampling is not applied)."""
        out: list[list[Completion]] = []
        for req in requests:
            if not req.key:
                raise UsageError("the replay backend needs GenerationRequest.key (the problem id)")
            comps = []
            for idx in range(len(req.seeds)):
                rec = self.rows.get((req.key, idx))
                if rec is None:
                    raise InputError(
                        f"no completion for problem_id={req.key!r}, sample_idx={idx}", file=self.path
                    )
                ids = (
                    self.tokenizer(rec["response"], add_special_tokens=False)["input_ids"]
                    if self.tokenizer
                    else []
                )
                comps.append(
                    Completion(
                        text=rec["response"],
                        token_ids=ids,
                        finish_reason=rec["finish_reason"],
                        token_count=rec["n_tokens"] if not ids else None,
                    )
                )
            out.append(comps)
        return out


def check_replay(
    path: str | Path, problem_ids: list[str], k: int, *, known: list[str] | None = None, limited: bool = False
) -> None:
    """Before a stage opens: every row of the replay file is valid (:func:`load_replay`), names a problem
    of the data (``known``, default ``problem_ids``; not checked when the data was ``limited`` by
    ``--limit``, whose dropped problems may have rows), and every problem of ``problem_ids`` has samples
    ``0..k-1``. An InputError names the file and the row, or the first missing pairs."""
    rows = load_replay(path)
    wanted = {str(pid) for pid in problem_ids}
    unknown = sorted({pid for pid, _ in rows} - {str(pid) for pid in (known or problem_ids)})
    if unknown and not limited:
        first = min(rec["row"] for (pid, _), rec in rows.items() if pid == unknown[0])
        raise InputError(
            f"samples for {len(unknown)} problem id(s) that are not in the data, e.g. "
            f"{', '.join(map(repr, unknown[:5]))}: check --data (and --limit)",
            file=path, row=first, field="problem_id",
        )  # fmt: skip
    missing = [(pid, i) for pid in sorted(wanted) for i in range(k) if (pid, i) not in rows]
    if missing:
        shown = ", ".join(f"{pid!r}/{i}" for pid, i in missing[:5])
        raise InputError(
            f"no completion for {len(missing)} (problem_id, sample_idx) pair(s) of the data, e.g. {shown}",
            file=path,
        )
