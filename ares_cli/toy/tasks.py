"""Toy task generator: chained integer arithmetic where difficulty is the number of steps.

A problem starts from a two-digit number and applies operations left to right (``+a``, ``-a``, ``*m``);
every intermediate value stays within ``0..MAX_VALUE``. Everything is a pure function of a seed.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from ares_cli.errors import InputError

MAX_DIFFICULTY = 10
MAX_VALUE = 999
MAX_ADDEND = 19
MAX_FACTOR = 3
SPLIT_SIZES = {"train": 2000, "val": 200, "test": 400}
SPLIT_SEEDS = {"train": 1001, "val": 2002, "test": 3003}
DATA_DIR = Path(__file__).parent / "data"

_PROBLEM_RE = re.compile(r"^Start at (\d+), then (.+)\.$")
_OP_RE = re.compile(r"^([+\-*])(\d+)$")


def apply_op(value: int, op: str, operand: int) -> int:
    """Apply one operation (``+``, ``-`` or ``*``) to ``value``."""
    if op == "+":
        return value + operand
    if op == "-":
        return value - operand
    if op == "*":
        return value * operand
    raise InputError(f"unknown toy operation {op!r}")


def _random_op(rng: random.Random, value: int) -> tuple[str, int]:
    """Pick an operation that keeps the value within ``0..MAX_VALUE``."""
    choices = []
    if value <= MAX_VALUE - 2:
        choices.append("+")
    if value >= 2:
        choices.append("-")
    if 2 * value <= MAX_VALUE and value >= 2:
        choices.append("*")
    op = rng.choice(choices)
    if op == "+":
        return op, rng.randint(2, min(MAX_ADDEND, MAX_VALUE - value))
    if op == "-":
        return op, rng.randint(2, min(MAX_ADDEND, value))
    return op, rng.randint(2, min(MAX_FACTOR, MAX_VALUE // value))


def random_ops(rng: random.Random, start: int, difficulty: int) -> list[tuple[str, int]]:
    """``difficulty`` operations from ``start`` drawn from ``rng``, every intermediate value in range."""
    value, steps = start, []
    for _ in range(difficulty):
        op, operand = _random_op(rng, value)
        steps.append((op, operand))
        value = apply_op(value, op, operand)
    return steps


def random_steps(rng: random.Random, difficulty: int) -> tuple[int, list[tuple[str, int]]]:
    """A start value and ``difficulty`` operations drawn from ``rng``."""
    start = rng.randint(10, 99)
    return start, random_ops(rng, start, difficulty)


def format_problem(start: int, steps: list[tuple[str, int]]) -> str:
    """The problem statement for a start value and its operations."""
    ops = ", ".join(f"{op}{operand}" for op, operand in steps)
    return f"Start at {start}, then {ops}."


def parse_problem(text: str) -> tuple[int, list[tuple[str, int]]]:
    """Inverse of :func:`format_problem`: the start value and operations of a problem statement."""
    match = _PROBLEM_RE.match(text.strip())
    if not match:
        raise InputError(f"not a toy problem: {text[:80]!r}")
    steps = []
    for part in match.group(2).split(", "):
        op_match = _OP_RE.match(part)
        if not op_match:
            raise InputError(f"bad toy operation {part!r} in {text[:80]!r}")
        steps.append((op_match.group(1), int(op_match.group(2))))
    return int(match.group(1)), steps


def solve(start: int, steps: list[tuple[str, int]]) -> int:
    """The exact result of applying ``steps`` to ``start``."""
    value = start
    for op, operand in steps:
        value = apply_op(value, op, operand)
    return value


def make_record(split: str, index: int, start: int, steps: list[tuple[str, int]]) -> dict:
    """A problem record in the shared schema, with a stable id."""
    return {
        "id": f"toy-{split}-{index:06d}",
        "source": "toy",
        "problem": format_problem(start, steps),
        "answer": str(solve(start, steps)),
        "meta": {"difficulty": len(steps)},
    }


def generate_split(
    split: str, size: int, seed: int, *, exclude: set[str] | None = None, max_difficulty: int = MAX_DIFFICULTY
) -> list[dict]:
    """``size`` distinct problems balanced over difficulty ``1..max_difficulty``, none in ``exclude``."""
    rng = random.Random(seed)
    seen = set(exclude or ())
    records = []
    for index in range(size):
        difficulty = 1 + index % max_difficulty
        while True:
            start, steps = random_steps(rng, difficulty)
            text = format_problem(start, steps)
            if text not in seen:
                break
        seen.add(text)
        records.append(make_record(split, index, start, steps))
    return records


def generate_all_splits() -> dict[str, list[dict]]:
    """The shipped splits (test first, then val, then train), pairwise disjoint by problem text."""
    splits: dict[str, list[dict]] = {}
    taken: set[str] = set()
    for name in ("test", "val", "train"):
        splits[name] = generate_split(name, SPLIT_SIZES[name], SPLIT_SEEDS[name], exclude=taken)
        taken.update(r["problem"] for r in splits[name])
    return {name: splits[name] for name in ("train", "val", "test")}


def write_jsonl(records: list[dict], path: Path) -> None:
    """Write records one JSON object a line (sorted keys, so files are byte-stable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, sort_keys=True) + "\n")


def regenerate_splits(out_dir: str | Path = DATA_DIR) -> dict[str, Path]:
    """Write ``{train,val,test}.jsonl`` into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    paths = {}
    for name, records in generate_all_splits().items():
        paths[name] = out_dir / f"{name}.jsonl"
        write_jsonl(records, paths[name])
    return paths


def split_path(split: str) -> Path:
    """Path of a shipped split file."""
    if split not in SPLIT_SIZES:
        raise InputError(f"unknown toy split {split!r}; expected one of {sorted(SPLIT_SIZES)}")
    return DATA_DIR / f"{split}.jsonl"


def load_split(split: str) -> list[dict]:
    """Records of a shipped split."""
    path = split_path(split)
    if not path.exists():
        raise InputError("toy split file missing; run ares_cli.toy.tasks.regenerate_splits()", file=path)
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
