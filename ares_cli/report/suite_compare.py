"""Compare suite artifacts: one row per model in the suite's (paper's) layout and, against a baseline, the
paired per-problem accuracy difference ± SE for every benchmark (from the suites' eval artifacts)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, UsageError


def is_suite(directory: str | Path) -> bool:
    """Whether ``directory`` holds a suite artifact's results (``results.json`` with suite columns)."""
    path = Path(directory) / "results.json"
    if not path.is_file():
        return False
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(doc, dict) and "suite" in doc and "columns" in doc


def load_suite_results(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / "results.json"
    if not is_suite(directory):
        raise InputError("not a suite artifact (no results.json with suite columns)", file=directory)
    return json.loads(path.read_text())


def suite_comparison(suites: dict[str, Path], resolve_eval, baseline: str | None = None) -> dict[str, Any]:
    """Rows per label and, with ``baseline``, paired differences per benchmark.

    ``resolve_eval`` maps an eval artifact id to its directory. All suites must be the same suite with
    the same columns (else InputError naming the first that differs).
    """
    from ares_cli.report.compare import load_eval, paired_difference, problem_accuracy

    if baseline is not None and baseline not in suites:
        raise UsageError(f"--baseline '{baseline}' is not one of the labels: {', '.join(suites)}")
    loaded = {label: load_suite_results(d) for label, d in suites.items()}
    first_label, first = next(iter(loaded.items()))
    names = [c["name"] for c in first["columns"]]
    for label, doc in loaded.items():
        if doc["suite"] != first["suite"] or [c["name"] for c in doc["columns"]] != names:
            raise InputError(
                f"'{label}' is suite {doc['suite']} with columns {[c['name'] for c in doc['columns']]}; "
                f"'{first_label}' is suite {first['suite']} with {names}",
                file=suites[label],
            )
    rows = {label: {c["name"]: {"value": c["value"], "se": c["se"]} for c in doc["columns"]}
            for label, doc in loaded.items()}  # fmt: skip
    benches = list(dict.fromkeys(c["bench"] for c in first["columns"] if c["bench"]))
    deltas: dict[str, dict[str, Any]] = {}
    if baseline is not None:
        accuracy = {
            label: {b: problem_accuracy(load_eval(resolve_eval(doc["evals"][b]))[3]) for b in benches}
            for label, doc in loaded.items()
        }
        for label in loaded:
            if label != baseline:
                deltas[label] = {
                    b: paired_difference(accuracy[label][b], accuracy[baseline][b]) for b in benches
                }
    return {"suite": first["suite"], "columns": names, "rows": rows, "benches": benches,
            "baseline": baseline, "deltas": deltas}  # fmt: skip


def _cell(value: float, se: float | None) -> str:
    return f"{value:.3f}" if se is None or math.isnan(se) else f"{value:.3f} ± {se:.3f}"


def suite_markdown(table: dict[str, Any]) -> str:
    """One row per model (the suite's columns), then the paired Δ against the baseline per benchmark."""
    cols = table["columns"]
    lines = [
        f"## Suite {table['suite']}",
        "",
        "| model | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    for label, row in table["rows"].items():
        lines.append(f"| {label} | " + " | ".join(_cell(row[c]["value"], row[c]["se"]) for c in cols) + " |")
    if table["deltas"]:
        benches = table["benches"]
        lines += ["", f"Paired per-problem accuracy difference against {table['baseline']} (± SE):", "",
                  "| model | " + " | ".join(f"Δ {b}" for b in benches) + " |", "|---" * (len(benches) + 1) + "|"]  # fmt: skip
        for label, per in table["deltas"].items():
            cells = [f"{per[b]['delta']:+.3f} ± " + ("-" if math.isnan(per[b]["se"]) else f"{per[b]['se']:.3f}")
                     for b in benches]  # fmt: skip
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
