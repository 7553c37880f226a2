"""The eval stage's inputs and preparation: everything ``ares eval`` checks before it opens its artifact.

The benchmarks (or replayed samples), the model, each benchmark's records, golds (choice graders) and
images, the judge, the generation budget, the difficulty source, and every prompt against the model's
context. ``ares eval`` runs these steps through a strict
:class:`~ares_cli.stages.checklist.Checklist`, ``ares plan eval`` through a collecting one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ares_cli.config import to_dict
from ares_cli.data.gold_check import check_choice_golds
from ares_cli.data.jsonl import read_jsonl
from ares_cli.errors import InputError, UsageError
from ares_cli.stages.sampling import MAX_K
from ares_cli.store.artifacts import ArtifactStore, InputRef

EVAL_BUDGET = 8192  # PAEC's evaluation budget, when neither the user nor the model sets one


@dataclass
class PreparedEval:
    """What :func:`prepare_eval` found; fields are None where their step failed (plan only)."""

    cfg: Any = None  # as the run uses it: backend replay with --from-samples / --regrade, budget resolved
    benches: list[dict[str, Any]] | None = None  # name, k, source, grader, aggregate, replay
    loaded: dict[str, Any] | None = None  # bench name -> LoadedDataset
    kept: dict[str, list[dict]] | None = None  # bench name -> problems fitting the context, sorted
    skipped: dict[str, list[str]] | None = None
    model_path: str | None = None
    budget: Any = None  # models.budget.Budget
    judge: Any = None
    difficulty: dict[str, Any] | None = None
    inputs: list | None = None

    def key_config(self) -> dict[str, Any]:
        """The config as it keys the artifact: the resolved config plus each benchmark's K and grader."""
        from ares_cli.grading.judge_grading import grader_label

        return to_dict(self.cfg) | {
            "benches": [f"{p['name']}:{p['k']}" for p in self.benches],
            "graders": {p["name"]: p["grader"] for p in self.benches},
            "grader_labels": {
                p["name"]: grader_label(p["grader"], trust_code=self.cfg.trust_grader_code)
                for p in self.benches
            },  # a new grader re-keys
            "aggregates": {p["name"]: p["aggregate"] for p in self.benches if p["aggregate"]},
        }


def prepare_eval(
    store, *, model: str | None, cfg, data: str | None = None, from_samples: str | None = None,
    regrade: str | None = None, difficulty_ref: str | None = None, checks=None, hash_inputs: bool = True,
) -> PreparedEval:  # fmt: skip
    """Run the eval stage's checks (``checks``: strict unless ``ares plan eval`` collects)."""
    from ares_cli.data.loader import load_problems
    from ares_cli.grading.declared import grader_for
    from ares_cli.models import check_image_support
    from ares_cli.models.budget import with_budget
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.inputs import dataset_ref, resolve_model
    from ares_cli.stages.judge_model import prepare_judge
    from ares_cli.stages.sampling import fit_context

    checks = checks or Checklist()
    out = PreparedEval(cfg=cfg, inputs=[], loaded={}, kept={}, skipped={}, difficulty={})
    benches = out.benches = checks.run(
        "benchmarks", lambda: bench_plan(store, cfg, data=data, from_samples=from_samples, regrade=regrade),
        lambda b: ", ".join(f"{p['name']}:{p['k']}" for p in b),
    )  # fmt: skip
    if benches is None:
        return out
    if from_samples or regrade:
        out.cfg = cfg = replace(cfg, backend="replay")
        for plan in benches:
            ref = checks.run(
                f"completions {plan['name']}", lambda p=plan: store.input_ref("completions", p["replay"])
            )
            out.inputs += [ref] if ref is not None else []
    if model is not None:
        resolved = checks.run("model", lambda: resolve_model(store, model, hash_files=hash_inputs),
                              lambda r: str(r[0]))  # fmt: skip
        if resolved is not None:
            out.model_path = resolved[0]
            out.inputs += [resolved[1]] if resolved[1] is not None else []
    elif cfg.backend != "replay":
        checks.fail("model", UsageError("--model is required (or --from-samples / --regrade)"))
    for plan in benches:
        name = plan["name"]
        loaded = checks.run(f"data {name}", lambda p=plan: load_problems(
            p["source"], limit=cfg.limit, skip_invalid_rows=cfg.skip_invalid_rows), lambda d: f"{len(d)} problems")  # fmt: skip
        if loaded is None:
            continue
        out.loaded[name] = loaded
        if hash_inputs:
            out.inputs.append(dataset_ref(loaded.records, loaded.provenance, role=f"bench:{name}"))
    for plan in benches:
        loaded = out.loaded.get(plan["name"])
        manifest = loaded.manifest if loaded is not None else None
        plan["grader"] = grader_for(cfg.grader or plan.get("grader"), manifest)
        plan.setdefault("aggregate", manifest.aggregate if manifest else None)
        if loaded is None:
            continue
        checks.run(f"choice golds {plan['name']}",
                   lambda p=plan, d=loaded: check_choice_golds(d.records, p["grader"], p["source"], cfg.trust_grader_code,
                                                      d.locations))  # fmt: skip
        if cfg.backend != "replay" and out.model_path is not None:
            checks.run(f"images vs model {plan['name']}",
                       lambda d=loaded: check_image_support(d.records, d.locations, out.model_path))  # fmt: skip
    judged = checks.run("judge", lambda: prepare_judge(store, [p["grader"] for p in benches], cfg.judge))
    if judged is not None:
        out.judge, judge_inputs = judged
        out.inputs += judge_inputs
    context_model = None if cfg.backend == "replay" else out.model_path
    if context_model is None and cfg.backend != "replay":
        return out
    cfg, budget = out.cfg, out.budget = with_budget(cfg, context_model, EVAL_BUDGET)
    if from_samples is not None and benches[0]["name"] in out.loaded:  # every row checked before it opens
        from ares_cli.generation.replay import check_replay

        records, k = out.loaded[benches[0]["name"]].records, benches[0]["k"]
        checks.run("replayed samples", lambda: check_replay(from_samples, [p["id"] for p in records], k,
                                                            limited=len(records) == cfg.limit))  # fmt: skip
    if difficulty_ref is not None:
        found = checks.run("difficulty", lambda: difficulty_from_passrate(store, difficulty_ref))
        if found is not None:
            out.difficulty, ref = found
            out.inputs.append(ref)
    for plan in benches:  # every benchmark's prompts are checked against the context before any work
        name = plan["name"]
        if name not in out.loaded:
            continue
        ordered = sorted(out.loaded[name].records, key=lambda p: p["id"])
        fitted = checks.run(f"prompts fit {name}", lambda o=ordered: fit_context(o, cfg, context_model, budget),
                            lambda f: f"{len(f[0])} fit, {len(f[1])} skipped")  # fmt: skip
        if fitted is not None:
            out.kept[name], out.skipped[name] = fitted
    return out


def parse_bench(spec: str, default_k: int) -> tuple[str, int]:
    """``math500:8`` → ("math500", 8); ``toy-test`` → ("toy-test", default_k)."""
    name, _, k = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not name:
        return spec, default_k
    try:
        value = int(k)
    except ValueError:
        return spec, default_k  # a colon that is part of a name (hf:org/x)
    if not 1 <= value <= MAX_K:
        raise UsageError(f"--bench {spec}: K must be >= 1 and <= {MAX_K}")
    return name, value


def bench_name(source: str) -> str:
    """A filesystem-safe label for a benchmark source."""
    return Path(source).stem if Path(source).suffix else source.replace("/", "_").replace(":", "_")


def difficulty_from_passrate(store: ArtifactStore, ref: str) -> tuple[dict[str, str], InputRef]:
    """Problem id → bucket from a passrate artifact (for benchmarks without difficulty metadata)."""
    input_ref = store.input_ref("difficulty", ref)  # verified before it is read
    rows = read_jsonl(Path(input_ref.path) / "passrates.jsonl")
    return {r["problem_id"]: r["bucket"] for r in rows}, input_ref


def bench_plan(store, cfg, *, data, from_samples, regrade) -> list[dict[str, Any]]:
    if regrade is not None:
        directory = store.verified(regrade)
        manifest = store.manifest(directory)
        if manifest["stage"] != "eval":
            raise InputError(f"{manifest['artifact_id']} is not an eval artifact")
        return _regrade_plan(directory, manifest, cfg)
    if from_samples is not None:
        if data is None:
            raise UsageError("--from-samples needs --data (the problems the samples answer)")
        path = Path(from_samples)
        if not path.is_file():
            raise InputError("file not found", file=path)
        counts: dict[str, int] = {}
        for row in read_jsonl(path):
            counts[str(row.get("problem_id"))] = counts.get(str(row.get("problem_id")), 0) + 1
        if not counts:
            raise InputError("no samples", file=path)
        k = min(counts.values())
        if k != max(counts.values()):  # scoring on the minimum would drop samples silently
            fewest = sorted(pid for pid, n in counts.items() if n == k)[:5]
            raise InputError(
                f"unequal sample counts per problem ({k} to {max(counts.values())}; {k} for {fewest}): "
                "every problem needs the same number of samples",
                file=path,
            )
        return [{"name": bench_name(data), "k": k, "source": data, "replay": str(path)}]
    specs = list(cfg.benches) + ([data] if data else [])
    if not specs:
        raise UsageError("name at least one --bench (or --data)")
    plans = []
    for spec in specs:
        if not str(spec).strip():
            raise UsageError("--bench: an empty benchmark name")
        source, k = parse_bench(spec, cfg.k)
        plans.append({"name": bench_name(source), "k": k, "source": source})
    if len({p["name"] for p in plans}) != len(plans):
        raise UsageError("a benchmark is named twice")
    return plans


def _regrade_plan(directory: Path, manifest: dict[str, Any], cfg) -> list[dict[str, Any]]:
    """The benchmarks of a stored eval, read as data: each name must stay inside the artifact's
    ``problems/`` and ``samples/``, and each stored grader must be a registered name unless ``--grader``
    replaces it (a stored module path is not imported)."""
    from ares_cli.grading.registry import is_registered

    source = directory / "manifest.json"
    earlier = manifest.get("config") or {}
    benches = earlier.get("benches")
    if not isinstance(benches, list) or not all(isinstance(b, str) for b in benches):
        raise InputError("must be a list of benchmark names", file=source, field="config.benches")
    plans = []
    for spec in benches:
        name, k = parse_bench(spec, cfg.k)
        if not _safe_name(name):
            raise InputError(
                f"benchmark name {name!r} is not a plain file name (it would leave the artifact)",
                file=source, field="config.benches",
            )  # fmt: skip
        grader = (earlier.get("graders") or {}).get(name) or earlier.get("grader")
        if cfg.grader is None and grader is not None and not is_registered(str(grader)):
            raise InputError(
                f"names grader {grader!r}, which is not a registered grader; a stored artifact is data "
                f"and never names code to import: pass --grader to regrade",
                file=source, field=f"config.graders.{name}",
            )  # fmt: skip
        plans.append(
            {
                "name": name,
                "k": k,
                "source": str(directory / "problems" / f"{name}.jsonl"),
                "replay": str(directory / "samples" / f"{name}.jsonl"),
                "grader": grader,
                "aggregate": (earlier.get("aggregates") or {}).get(name),
            }
        )
    return plans


def _safe_name(name: str) -> bool:
    """A single path component: no separator, not ``.``/``..``, no NUL (what :func:`bench_name` writes)."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0")
