"""Evaluation suites: a named list of (benchmark, K, metrics) run as one ``suite`` artifact.

A suite file (``pipelines/suites/<name>.yaml``, or any path)::

    name: paec-math
    description: PAEC table 1
    eval: {temperature: 0.6}                 # optional eval settings under the CLI's (defaults < these < flags)
    benches:
      - {bench: aime2024, label: AIME24, k: 32, metrics: [maj, avg]}
    average: [maj, avg]                     # optional macro-average columns; ``headline`` averages each
                                            # benchmark's first metric (ARES's "Avg." column)

Metrics: ``avg`` (avg@K), ``maj`` (maj@K), ``pass@N`` (N <= K), ``aggregate`` (the manifest's own score,
e.g. DynaMath worst case). Each benchmark is its own eval artifact, reused when up to date; the suite
artifact takes them as inputs and writes ``results.json`` and ``results.md`` (the paper's layout: one
row, a column per benchmark metric, then the macro-averages). A macro-average is the mean of the
benchmark values and its SE is sqrt(sum SE_b^2) / B (benchmarks independent).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ares_cli.errors import InputError, InputErrors
from ares_cli.stages.sampling import MAX_K

CODE_VERSION = "1"
_METRIC = re.compile(r"^(avg|maj|aggregate|pass@\d+)$")
HEADLINE = "headline"
_KEYS = {"name", "description", "eval", "benches", "average", "notes"}
_BENCH_KEYS = {"bench", "label", "k", "metrics"}


@dataclass(frozen=True)
class SuiteBench:
    """One benchmark of a suite: manifest (or data source) name, column label, K and metrics."""

    bench: str
    label: str
    k: int
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    """A parsed suite file."""

    name: str
    description: str
    benches: tuple[SuiteBench, ...]
    average: tuple[str, ...]
    eval: dict[str, Any]
    path: Path

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "eval": self.eval, "average": list(self.average),
            "benches": [{"bench": b.bench, "label": b.label, "k": b.k, "metrics": list(b.metrics)}
                        for b in self.benches],
        }  # fmt: skip


def suite_dir() -> Path:
    """The shipped suites: ``pipelines/suites/`` of the repository."""
    from ares_cli.data.manifests import package_root

    return package_root() / "pipelines" / "suites"


def find_suite(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise InputError("suite file not found", file=path)
        return path
    candidate = suite_dir() / f"{name}.yaml"
    if candidate.is_file():
        return candidate
    known = ", ".join(sorted(p.stem for p in suite_dir().glob("*.yaml"))) or "(none)"
    raise InputError(f"unknown suite {name!r}; known suites: {known}")


def load_suite(name: str) -> Suite:
    """Parse and validate a suite by name or path; every problem is reported with file and field."""
    import yaml

    path = find_suite(name)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text ({err.reason} at byte {err.start})", file=path) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=path) from None
    if not isinstance(doc, dict):
        raise InputError("a suite must be a YAML mapping", file=path)
    errors: list[InputError] = []

    def err(field: str, message: str) -> None:
        errors.append(InputError(message, file=path, field=field))

    for key in doc:
        if key not in _KEYS:
            err(str(key), f"unknown key (allowed: {', '.join(sorted(_KEYS))})")
    if doc.get("name") != path.stem:
        err("name", f"must equal the file name {path.stem!r}")
    if not isinstance(doc.get("eval", {}), dict):
        err("eval", "must be a mapping of eval settings")
    benches = []
    raw = doc.get("benches")
    if not isinstance(raw, list) or not raw:
        err("benches", "must be a non-empty list")
        raw = []
    first_of_label: dict[str, int] = {}
    for i, entry in enumerate(raw):
        bench = _parse_bench(entry, f"benches[{i}]", err)
        if bench is None:
            continue
        benches.append(bench)
        if bench.label in first_of_label:  # two benchmarks under one label: one column would hide the other
            j = first_of_label[bench.label]
            err(f"benches[{i}].label", f"label {bench.label!r} is also the label of benches[{j}]")
        first_of_label.setdefault(bench.label, i)
    if len({b.bench for b in benches}) != len(benches):
        err("benches", "a benchmark is listed twice")
    average = doc.get("average") or []
    if not isinstance(average, list) or not all(
        isinstance(m, str) and (_METRIC.match(m) or m == HEADLINE) for m in average
    ):
        err("average", f"must be a list of metrics (avg, maj, pass@N, aggregate, {HEADLINE})")
        average = []
    for metric in average:
        if metric != HEADLINE and any(metric not in b.metrics for b in benches):
            err("average", f"{metric!r} must be a metric of every benchmark to be averaged")
    if errors:
        raise InputErrors(errors)
    return Suite(
        name=doc["name"], description=str(doc.get("description", "")), benches=tuple(benches),
        average=tuple(average), eval=dict(doc.get("eval") or {}), path=path,
    )  # fmt: skip


def _parse_bench(entry: Any, where: str, err) -> SuiteBench | None:
    if not isinstance(entry, dict):
        err(where, "must be a mapping {bench, k, metrics, label}")
        return None
    bad = False
    for key in entry:
        if key not in _BENCH_KEYS:
            err(f"{where}.{key}", f"unknown key (allowed: {', '.join(sorted(_BENCH_KEYS))})")
            bad = True
    k = entry.get("k")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        err(f"{where}.k", f"must be an integer in 1..{MAX_K}, got {k!r}")
        bad = True
    if not isinstance(entry.get("bench"), str) or not entry["bench"]:
        got = f", got {entry['bench']!r}" if entry.get("bench") is not None else ""
        err(f"{where}.bench", f"missing (a manifest name or data source){got}")
        bad = True
    if "label" in entry and (not isinstance(entry["label"], str) or not entry["label"].strip()):
        err(f"{where}.label", f"must be a non-empty string, got {entry['label']!r}")
        bad = True
    metrics = entry.get("metrics")
    if (
        not isinstance(metrics, list)
        or not metrics
        or not all(isinstance(m, str) and _METRIC.match(m) for m in metrics)
    ):
        err(f"{where}.metrics", "must be a non-empty list of avg, maj, pass@N, aggregate")
        bad = True
    elif not bad and any(m.startswith("pass@") and not 1 <= int(m[5:]) <= k for m in metrics):
        err(f"{where}.metrics", f"pass@N needs 1 <= N <= k ({k})")
        bad = True
    if bad:
        return None
    return SuiteBench(entry["bench"], str(entry.get("label") or entry["bench"]), k, tuple(metrics))


def metric_value(result: dict[str, Any], metric: str, k: int) -> tuple[float, float]:
    """(value, SE) of a suite metric in one benchmark's eval result."""
    if metric == "aggregate":
        agg = result.get("aggregate")
        if not agg:
            raise InputError("the benchmark's manifest defines no aggregate score", field="metrics")
        return agg["score"], agg["score_se"]
    key = {"avg": f"avg@{k}", "maj": f"maj@{k}"}.get(metric, metric)
    overall = result["overall"]
    if key not in overall:
        raise InputError(f"metric {key} not in the eval results (available: {', '.join(overall)})")
    return overall[key], overall.get(f"{key}_se", math.nan)


def column_name(bench: SuiteBench, metric: str) -> str:
    name = {"avg": f"Avg@{bench.k}", "maj": f"Maj@{bench.k}", "aggregate": "score"}.get(metric, metric)
    return f"{bench.label} {name}"


def suite_table(suite: Suite, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Columns and values of the suite's table (pure): per benchmark metric, macro-averages, and the
    accuracy and mean response length per difficulty level of every benchmark that has levels."""
    columns: list[dict[str, Any]] = []
    for b in suite.benches:
        for metric in b.metrics:
            value, se = metric_value(results[b.bench], metric, b.k)
            columns.append({"name": column_name(b, metric), "bench": b.bench, "metric": metric, "k": b.k,
                            "value": value, "se": se})  # fmt: skip
    firsts = {b.bench: b.metrics[0] for b in suite.benches}
    for metric in suite.average:
        if metric == HEADLINE:
            parts = [c for c in columns if c["bench"] and c["metric"] == firsts[c["bench"]]]
        else:
            parts = [c for c in columns if c["metric"] == metric]
        value = math.fsum(c["value"] for c in parts) / len(parts)
        se = math.sqrt(math.fsum(c["se"] ** 2 for c in parts)) / len(parts)
        label = {"avg": "Avg", "maj": "Maj", "aggregate": "score", HEADLINE: ""}.get(metric, metric)
        columns.append(
            {"name": f"Average {label}".strip(), "bench": None, "metric": metric, "value": value, "se": se}
        )
    by_difficulty = {}
    for b in suite.benches:
        levels = results[b.bench].get("by_difficulty")
        if levels:
            by_difficulty[b.bench] = {
                level: {"acc": m[f"avg@{b.k}"], "acc_se": m.get(f"avg@{b.k}_se"), "len_mean": m["len_mean"],
                        "n_problems": m["n_problems"]}
                for level, m in levels.items()
            }  # fmt: skip
    return {"suite": suite.name, "columns": columns, "by_difficulty": by_difficulty}


def markdown(table: dict[str, Any], model: str) -> str:
    """The suite's table in markdown: one row for the model, then accuracy / length per difficulty."""
    cols = table["columns"]
    lines = [f"## Suite {table['suite']}", "", "| model | " + " | ".join(c["name"] for c in cols) + " |",
             "|---" * (len(cols) + 1) + "|",
             f"| {model} | " + " | ".join(_cell(c["value"], c["se"]) for c in cols) + " |"]  # fmt: skip
    for bench, levels in table["by_difficulty"].items():
        lines += ["", f"### {bench} by difficulty", "", "| level | problems | accuracy | mean length |",
                  "|---|---|---|---|"]  # fmt: skip
        for level, m in levels.items():
            lines.append(
                f"| {level} | {int(m['n_problems'])} | {_cell(m['acc'], m['acc_se'])} | {m['len_mean']:.0f} |"
            )
    lines += ["", "Values are fractions in [0, 1], ± one standard error over problems."]
    return "\n".join(lines) + "\n"


def _cell(value: float, se: float | None) -> str:
    return f"{value:.3f}" if se is None or se != se else f"{value:.3f} ± {se:.3f}"


def prepare_suite(suite: Suite, cfg) -> None:
    """Every benchmark of the suite checked before the first eval runs: its data loads (the manifest or
    file exists, every record and image is valid) and its golds suit its grader; errors of all of them are
    reported together, naming the suite file and the benchmark (exit 3)."""
    from ares_cli.data.gold_check import check_choice_golds
    from ares_cli.data.loader import load_problems
    from ares_cli.errors import AresError
    from ares_cli.grading.declared import grader_for

    errors: list[InputError] = []
    for i, b in enumerate(suite.benches):
        try:
            loaded = load_problems(b.bench, limit=cfg.limit, skip_invalid_rows=cfg.skip_invalid_rows)
            grader = grader_for(cfg.grader, loaded.manifest)
            check_choice_golds(loaded.records, grader, b.bench, cfg.trust_grader_code, loaded.locations)
        except InputErrors as exc:
            errors += [InputError(f"benches[{i}] ({b.bench}): {e}", file=suite.path) for e in exc.errors]
        except AresError as exc:
            if not isinstance(exc, InputError):
                raise
            errors.append(
                InputError(f"{' '.join(str(exc).split())}", file=suite.path, field=f"benches[{i}].bench")
            )
    if errors:
        raise InputErrors(errors)


def run_suite(
    store,
    suite: Suite,
    *,
    model: str,
    cfg,
    force: bool = False,
    log: Callable[[str], None] = print,
):
    """Run (or reuse) one eval artifact per benchmark, then the suite artifact over them.

    Returns (StageRun, table, {bench: eval artifact id}, {bench: reused?}).
    """
    from ares_cli.config import to_dict
    from ares_cli.stages.evaluate import run_eval
    from ares_cli.store.hashing import strict_json

    started = time.time()  # the suite's time covers its checks and evals (a pipeline's eval stage is one)
    prepare_suite(suite, cfg)
    results, evals, reused, inputs = {}, {}, {}, []
    for b in suite.benches:
        bench_cfg = replace(cfg, benches=[f"{b.bench}:{b.k}"], k=b.k)
        run, result = run_eval(store, model=model, cfg=bench_cfg, force=force, log=log)
        name = next(iter(result))
        results[b.bench], evals[b.bench], reused[b.bench] = result[name], run.artifact_id, run.up_to_date
        inputs.append(store.input_ref(f"eval:{b.bench}", run.final_dir))
        log(f"suite {suite.name}: {b.bench} {'up to date' if run.up_to_date else 'done'} ({run.artifact_id})")
    config = {"suite": suite.to_dict(), "eval": to_dict(cfg), "model": model}
    run = store.open_stage("suite", code_version=CODE_VERSION, config=config, inputs=inputs, force=force)
    run.started = started
    if run.up_to_date:
        return run, json.loads((run.final_dir / "results.json").read_text()), evals, reused
    table = suite_table(suite, results) | {"model": model, "evals": evals}
    (run.work_dir / "results.json").write_text(
        json.dumps(strict_json(table), indent=2, sort_keys=True) + "\n"
    )
    (run.work_dir / "results.md").write_text(markdown(table, model))
    run.finalize({"columns": {c["name"]: c["value"] for c in table["columns"]}})
    return run, table, evals, reused
