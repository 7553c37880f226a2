"""The tables of docs/results.md and docs/performance.md, rendered from the stored data in studies/results/
(and checked against it).

    .venv/bin/python studies/render_results.py --check      # exit 1 naming every cell that disagrees
    .venv/bin/python studies/render_results.py --write      # rewrite each marked table from its data

A table backed by data follows a marker line ``<!-- results: SOURCE -->``. SOURCE is ``FILE#N`` for the Nth
markdown table of a stored report (``demo-report.md#2``) or ``FILE#SECTION`` for a table of a study summary
(``mechanisms.json#aepo_kl``: the per-seed numbers ``studies/summarize_mechanisms.py`` writes, rendered by
:data:`STUDY_TABLES`), or a stored benchmark's JSON (``bench/memory.json#table``, rendered by
``studies/render_bench.py``). Cells are compared as text with markdown emphasis removed, so bold stays editorial.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "studies" / "results"
DOC = ROOT / "docs" / "results.md"
PERFORMANCE_DOC = ROOT / "docs" / "performance.md"  # its benchmark tables: studies/render_bench.py
MARKER = re.compile(r"^<!-- results: (?P<file>[\w.-]+(?:/[\w.-]+)*)#(?P<part>[\w-]+) -->$")


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


sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules of table renderers
from render_bench import BENCH_TABLES  # noqa: E402
from render_study import STUDY_TABLES as SUMMARY_TABLES  # noqa: E402
from render_study import PairedTable, Row  # noqa: E402, F401  (Row: part of this module's interface)

STUDY_TABLES = SUMMARY_TABLES | BENCH_TABLES  # every table a marker can name


def render_source(source: str, results: Path = RESULTS) -> list[str]:
    """The table lines that ``source`` (``FILE#PART``) holds, from the files under ``results``."""
    name, part = source.split("#", 1)
    if ".." in Path(name).parts:
        raise ValueError(f"{source}: a stored file is named below studies/results/, without '..'")
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
    ap.add_argument("--doc", type=Path, action="append",
                    help="a markdown file (repeatable; default docs/results.md and docs/performance.md)")  # fmt: skip
    args = ap.parse_args(argv)
    status = 0
    for doc in args.doc or [DOC, PERFORMANCE_DOC]:
        text = doc.read_text(encoding="utf-8")
        if args.write:
            try:
                doc.write_text(rewritten(text), encoding="utf-8")
            except ValueError as exc:  # a marker without a table or without data: nothing is written
                print(f"{doc}: {exc}", file=sys.stderr)
                return 1
        problems = differences(doc.read_text(encoding="utf-8"), doc_name=str(doc))
        for line in problems:
            print(line, file=sys.stderr)
        print(f"{doc}: {len(marked_tables(text))} tables checked, {len(problems)} cells disagree")
        status = 1 if problems else status
    return status


if __name__ == "__main__":
    sys.exit(main())
