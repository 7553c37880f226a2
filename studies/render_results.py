"""The tables of docs/results.md, rendered from the stored data in studies/results/ (and checked against it).

    .venv/bin/python studies/render_results.py --check      # exit 1 naming every cell that disagrees
    .venv/bin/python studies/render_results.py --write      # rewrite each marked table from its data

A table backed by data follows a marker line ``<!-- results: SOURCE -->``. SOURCE is ``FILE#N`` for the Nth
markdown table of a stored report (``demo-report.md#2``) or ``FILE#SECTION`` for a table of a study summary
(``mechanisms.json#aepo_kl``: the per-seed numbers ``studies/summarize_mechanisms.py`` writes, rendered by
:data:`STUDY_TABLES`). Cells are compared as text with markdown emphasis removed, so bold stays editorial.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "studies" / "results"
DOC = ROOT / "docs" / "results.md"
MARKER = re.compile(r"^<!-- results: (?P<file>[\w.-]+)#(?P<part>[\w-]+) -->$")


def cells(line: str) -> list[str]:
    """The cells of one markdown table row, stripped (escaped pipes kept inside their cell)."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return [p.strip() for p in parts[1:-1]]


def plain(cell: str) -> str:
    return cell.replace("**", "").strip()


def tables_of(text: str) -> list[list[str]]:
    """Every markdown table of ``text`` as its lines (header and separator included), in order."""
    found, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


@dataclass(frozen=True)
class MarkedTable:
    source: str  # "demo-report.md#2"
    start: int  # index of the table's first line in the doc
    lines: list[str]


def marked_tables(text: str) -> list[MarkedTable]:
    """Each marker of the doc with the table right below it; ValueError when a marker has no table."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if not MARKER.match(line.strip()):
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        table = []
        while j + len(table) < len(lines) and lines[j + len(table)].startswith("|"):
            table.append(lines[j + len(table)])
        if not table:
            raise ValueError(f"line {i + 1}: marker {line.strip()} has no table below it")
        out.append(MarkedTable(line.strip()[len("<!-- results: ") : -len(" -->")], j, table))
    return out


# --- study summaries -------------------------------------------------------------------------------------


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("nan")
    return mean, (var / n) ** 0.5


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}".replace("-", "−")


def _fmt_pm(values: list[float], digits: int, signed: bool = False) -> str:
    mean, se = _mean_se(values)
    head = f"{'+' if signed and mean >= 0 else ''}{_fmt(mean, digits)}"
    return f"{head} ± {_fmt(se, digits)}"


def _signed(value: float, digits: int) -> str:
    return f"{'+' if value >= 0 else ''}{_fmt(value, digits)}"


@dataclass(frozen=True)
class Row:
    label: str  # as the doc prints it
    key: str  # the quantity's label in the summary
    digits: int


@dataclass(frozen=True)
class PairedTable:
    """GRPO | arm | paired Δ | Δ per seed, one row per quantity of ``arm`` in a study summary."""

    arm: str
    header: str  # the doc's header row
    rows: tuple[Row, ...]

    def render(self, summary: dict) -> list[str]:
        lines = [self.header, "|" + "---|" * len(cells(self.header))]
        for row in self.rows:
            entry = summary[self.arm][row.key]
            seeds = sorted(set(entry["arm"]) & set(entry["grpo"]), key=int)
            arm = [float(entry["arm"][s]) for s in seeds]
            base = [float(entry["grpo"][s]) for s in seeds]
            deltas = [a - b for a, b in zip(arm, base, strict=True)]
            lines.append(
                f"| {row.label} | {_fmt_pm(base, row.digits)} | {_fmt_pm(arm, row.digits)} | "
                f"{_fmt_pm(deltas, row.digits, signed=True)} | "
                + ", ".join(_signed(d, row.digits) for d in deltas)
                + " |"
            )
        return lines


LATE = "steps 31–60"  # the mechanism study's late window (60-step runs)
STUDY_TABLES: dict[str, dict[str, Callable[[dict], list[str]] | PairedTable]] = {
    "mechanisms.json": {
        "aepo_shaping": PairedTable(
            arm="aepo_shaping",
            header="| quantity (steps 31–60) | GRPO | AEPO shaping | paired Δ | Δ per seed |",
            rows=(
                Row("hard bucket: N_HE per response", f"hard N_HE, {LATE}", 2),
                Row("hard bucket: response length (tokens)", f"hard response length, {LATE}", 1),
                Row("easy bucket: response length (tokens)", f"easy response length, {LATE}", 1),
                Row("easy bucket: N_HE per response", f"easy N_HE, {LATE}", 3),
                Row("medium bucket: N_HE per response", f"medium N_HE, {LATE}", 2),
                Row("rollout accuracy", f"rollout accuracy, {LATE}", 3),
            ),
        ),
    },
}


def render_source(source: str, results: Path = RESULTS) -> list[str]:
    """The table lines that ``source`` (``FILE#PART``) holds, from the files under ``results``."""
    name, part = source.split("#", 1)
    path = results / name
    if not path.is_file():
        raise ValueError(f"{source}: no stored data at {path.relative_to(ROOT)}")
    if name.endswith(".md"):
        found = tables_of(path.read_text(encoding="utf-8"))
        if not part.isdigit() or not 1 <= int(part) <= len(found):
            raise ValueError(f"{source}: {name} has {len(found)} tables")
        return found[int(part) - 1]
    spec = STUDY_TABLES.get(name, {}).get(part)
    if spec is None:
        raise ValueError(f"{source}: no table '{part}' is declared for {name}")
    summary = json.loads(path.read_text(encoding="utf-8"))
    return spec.render(summary) if isinstance(spec, PairedTable) else spec(summary)


def differences(doc_text: str, results: Path = RESULTS, doc_name: str = "docs/results.md") -> list[str]:
    """One line per cell where a marked table of the doc disagrees with its data (empty: all agree)."""
    problems = []
    for table in marked_tables(doc_text):
        try:
            want = render_source(table.source, results)
        except ValueError as exc:
            problems.append(f"{doc_name} line {table.start + 1}: {exc}")
            continue
        if len(want) != len(table.lines):
            problems.append(f"{doc_name} line {table.start + 1} ({table.source}): {len(table.lines) - 2} rows, "
                            f"the data has {len(want) - 2}")  # fmt: skip
        header = cells(want[0])
        for k, (have_line, want_line) in enumerate(zip(table.lines, want, strict=False)):
            if k == 1:
                continue
            have, data = [plain(c) for c in cells(have_line)], [plain(c) for c in cells(want_line)]
            for col in range(max(len(have), len(data))):
                h = have[col] if col < len(have) else "(missing)"
                d = data[col] if col < len(data) else "(missing)"
                if h != d:
                    where = f"row '{data[0] if data else k}', column '{header[col] if col < len(header) else col}'"
                    problems.append(f"{doc_name} line {table.start + k + 1} ({table.source}), {where}: "
                                    f"the doc says '{h}', the data '{d}'")  # fmt: skip
    return problems


def rewritten(doc_text: str, results: Path = RESULTS) -> str:
    """The doc with every marked table replaced by its data (a cell bold in the doc stays bold)."""
    lines = doc_text.splitlines()
    for table in reversed(marked_tables(doc_text)):
        want = render_source(table.source, results)
        bold = {
            (k, c) for k, line in enumerate(table.lines) for c, cell in enumerate(cells(line)) if "**" in cell
        }
        out = []
        for k, line in enumerate(want):
            if k == 1 or not any(key[0] == k for key in bold):
                out.append(line)
                continue
            row = [f"**{c}**" if (k, i) in bold else c for i, c in enumerate(cells(line))]
            out.append("| " + " | ".join(row) + " |")
        lines[table.start : table.start + len(table.lines)] = out
    return "\n".join(lines) + ("\n" if doc_text.endswith("\n") else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list every cell that disagrees with its data")
    mode.add_argument("--write", action="store_true", help="rewrite every marked table from its data")
    ap.add_argument("--doc", type=Path, default=DOC, help="the markdown file (default docs/results.md)")
    args = ap.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    if args.write:
        args.doc.write_text(rewritten(text), encoding="utf-8")
    problems = differences(args.doc.read_text(encoding="utf-8"), doc_name=str(args.doc))
    for line in problems:
        print(line, file=sys.stderr)
    print(f"{len(marked_tables(text))} tables checked, {len(problems)} cells disagree")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
