"""Content hashes: file bytes, text, and canonical JSON of configs and records."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["sha256_file", "sha256_text", "canonical_json", "sha256_records", "strict_json", "json_default"]


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    """Hex sha256 of UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_json(value: Any) -> str:
    """Deterministic JSON text (sorted keys, no spaces, UTF-8) used for content hashes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=json_default)


def sha256_records(records: Iterable[Any]) -> str:
    """Hex sha256 of the canonical JSON of a list of records."""
    return sha256_text(canonical_json(list(records)))


def strict_json(value: Any) -> Any:
    """A copy with NaN and infinities replaced by None, so files stay valid JSON for jq and pandas."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def json_default(value: Any) -> Any:
    """Numpy scalars/arrays as lists, anything else (paths) as text."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
