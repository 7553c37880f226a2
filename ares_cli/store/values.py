"""Typed, ranged values from text and JSON nobody vouches for: one parser for every planned quantity.

``--gpu-memory``, ``--throughput``, a DeepSpeed file's numbers and an artifact's manifest stats are each
read through these functions, never through a bare ``int()`` / ``float()``: ``float("1e400")`` is
infinity, ``int(float("inf"))`` raises ``OverflowError``, ``True`` is an ``int`` and ``json`` reads
``NaN``. A value is refused with the place it came from (:class:`At`): a command-line option is a
:class:`~ares_cli.errors.UsageError` (exit 2) naming the option, a file's field an
:class:`~ares_cli.errors.InputError` (exit 3) naming the file and the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ares_cli.errors import AresError, InputError, UsageError

MAX_COUNT = 1 << 53  # the largest integer a JSON number (a float64) holds exactly
BYTE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
MAX_DEVICE_BYTES = 2**50  # 1 PiB: over a thousand times the largest GPU memory
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?")
_SIZE = re.compile(r"\s*(" + _NUMBER.pattern + r")\s*([a-z]*)\s*")


@dataclass(frozen=True)
class At:
    """Where a value came from: a command-line ``option``, or ``field`` (a dotted path) of ``file`` (at
    ``row`` of a JSONL file) read for ``what`` (an option the file was given to, said in the message)."""

    option: str | None = None
    file: str | Path | None = None
    field: str | None = None
    row: int | None = None
    what: str | None = None

    @classmethod
    def opt(cls, name: str) -> At:
        return cls(option=name)

    @classmethod
    def in_file(
        cls, file: str | Path, field: str | None = None, *, row: int | None = None, what: str | None = None
    ) -> At:
        return cls(file=file, field=field, row=row, what=what)

    def child(self, key: str | int) -> At:
        """The place of ``key`` inside this value (``zero_optimization`` -> ``zero_optimization.stage``)."""
        if isinstance(key, int):
            return At(self.option, self.file, f"{self.field or ''}[{key}]", self.row, self.what)
        return At(self.option, self.file, f"{self.field}.{key}" if self.field else key, self.row, self.what)

    def error(self, message: str) -> AresError:
        if self.option is not None:
            return UsageError(f"{self.option}: {message}")
        told = f"{self.what}: {message}" if self.what else message
        return InputError(told, file=self.file, row=self.row, field=self.field)


def kind(value: Any) -> str:
    """A value's JSON kind for a message (``True`` is a boolean, not a number)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def number(value: Any, at: At, *, minimum: float = 0.0, inclusive: bool = False,
           maximum: float = math.inf) -> float:  # fmt: skip
    """A finite real number above ``minimum`` (or equal to it when ``inclusive``), at most ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise at.error(f"must be a number, got {kind(value)} ({_shown(value)})")
    try:
        value = float(value)
    except OverflowError:  # an integer past float range (JSON allows 10**400)
        value = math.inf if value > 0 else -math.inf
    if not math.isfinite(value):
        raise at.error(f"must be a finite number, got {value}")
    below = value < minimum if inclusive else value <= minimum
    if below:
        raise at.error(f"must be {'>=' if inclusive else '>'} {minimum:g}, got {value:g}")
    if value > maximum:
        raise at.error(f"must be at most {maximum:g}, got {value:g}")
    return value


def count(
    value: Any, at: At, *, minimum: int = 1, maximum: int = MAX_COUNT, integral_floats: bool = False
) -> int:
    """An integer in ``[minimum, maximum]``. A boolean is refused; a float is refused unless
    ``integral_floats`` and it has no fraction (DeepSpeed files often write ``5e8`` for a bucket size)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise at.error(f"must be an integer, got {kind(value)} ({_shown(value)})")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise at.error(f"must be a finite integer, got {value}")
        if not integral_floats or value != int(value):
            raise at.error(f"must be an integer, got {value!r}")
        value = int(value)
    if value < minimum:
        raise at.error(f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise at.error(f"must be at most {maximum:,}, got {value:,}")
    return value


def boolean(value: Any, at: At) -> bool:
    """``true`` or ``false`` only (not 0/1, not ``"false"``, which is truthy)."""
    if not isinstance(value, bool):
        raise at.error(f"must be true or false, got {kind(value)} ({_shown(value)})")
    return value


def mapping(value: Any, at: At) -> dict:
    """A JSON object."""
    if not isinstance(value, dict):
        raise at.error(f"must be an object (a mapping of keys), got {kind(value)}")
    return value


def number_text(text: str, at: At, *, maximum: float = math.inf) -> float:
    """A positive finite number written as plain decimal text (``2000``, ``1.5e3``); not ``inf``, ``nan``,
    ``1e400`` (infinite as a float), ``1_000`` or hex."""
    if not _NUMBER.fullmatch(text.strip().lower()):
        raise at.error(f"expected a positive number, got {text!r}")
    return number(float(text), at, maximum=maximum)


def looks_numeric(text: str) -> bool:
    """Whether ``text`` is meant as a number (decimal, or a spelling ``float()`` takes: inf, nan)."""
    stripped = text.strip().lower().lstrip("+-")
    return bool(_NUMBER.fullmatch(stripped)) or stripped in ("inf", "infinity", "nan")


def byte_size(text: str, at: At, *, maximum: int = MAX_DEVICE_BYTES) -> int:
    """``80GiB`` / ``80GB`` / ``24 GiB`` / ``1.5e10`` as bytes: a positive, finite size of at least one
    byte and at most ``maximum`` (``-1``, ``nan``, ``1e400`` and ``1e309GiB`` are refused, never overflow)."""
    match = _SIZE.fullmatch(text.lower()) if isinstance(text, str) else None
    if not match or match.group(2) not in BYTE_UNITS:
        raise at.error(f"expected a size like 80GiB or 24GB, got {text!r}")
    value = float(match.group(1))
    if not math.isfinite(value) or value <= 0:
        raise at.error(f"a size must be a positive finite number of bytes, got {text!r}")
    size = value * BYTE_UNITS[match.group(2)]
    if not math.isfinite(size) or size > maximum:
        raise at.error(f"{text!r} is over the {maximum / 2**40:,.0f} TiB limit")
    if size < 1:
        raise at.error(f"{text!r} is less than one byte")
    return int(size)
