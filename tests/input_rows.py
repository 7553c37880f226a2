"""Row files for the input tests: a JSONL writer and a minimal problem record."""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, rows: list) -> Path:
    """``rows`` as JSON lines at ``path`` (returned)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_plus_one(pid: str, **extra) -> dict:
    """A valid toy problem record ("What is 1+1?", answer 2) with ``extra`` fields set or overridden."""
    return {"id": pid, "source": "toy", "problem": "What is 1+1?", "answer": "2", **extra}
