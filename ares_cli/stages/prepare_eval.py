"""The eval stage's preparation: everything ``ares eval`` checks before it opens its artifact.

The benchmarks (or replayed samples), the model, each benchmark's records, golds (choice graders) and
images, the judge, the generation budget, the difficulty source, and every prompt against the model's
context. ``ares eval`` runs these steps through a strict
:class:`~ares_cli.stages.checklist.Checklist`, ``ares plan eval`` through a collecting one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ares_cli.config import to_dict
from ares_cli.errors import UsageError


@dataclass
class PreparedEval:
    """What :func:`prepare_eval` found; fields are None where their step failed (plan only)."""

    cfg: Any = None  # as the run uses it: backend replay with --from-samples / --regrade, budget resolved
    benches: list[dict[str, Any]] | None = None  # name, k, source, grader, aggregate, replay
    loaded: dict[str, Any] | None = None  # bench name -> LoadedDataset
    kept: dict[str, list[dict]] | None = None  # bench name -> problems fitting the context, sorted
    skipped: dict[str, list[str]] | None = None
    model_path: str | None = None
    budget: Any = None  # stages.budget.Budget
    judge: Any = None
    difficulty: dict[str, Any] | None = None
    inputs: list | None = None

    def key_config(self) -> dict[str, Any]:
        """The config as it keys the artifact: the resolved config plus each benchmark's K and grader."""
        from ares_cli.grading.judged import grader_label

        return to_dict(self.cfg) | {
            "benches": [f"{p['name']}:{p['k']}" for p in self.benches],
            "graders": {p["name"]: p["grader"] for p in self.benches},
            "grader_labels": {p["name"]: grader_label(p["grader"]) for p in self.benches},  # a new grader re-keys
            "aggregates": {p["name"]: p["aggregate"] for p in self.benches if p["aggregate"]},
        }


def prepare_eval(
    store, *, model: str | None, cfg, data: str | None = None, from_samples: str | None = None,
    regrade: str | None = None, difficulty_ref: str | None = None, checks=None, hash_inputs: bool = True,
) -> PreparedEval:  # fmt: skip
    """Run the eval stage's checks (``checks``: strict unless ``ares plan eval`` collects)."""
    from ares_cli.data.loader import load_problems
    from ares_cli.models import check_image_support
    from ares_cli.stages.budget import with_budget
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.evaluate import EVAL_BUDGET, bench_plan, check_golds, difficulty_from_passrate
    from ares_cli.stages.inputs import dataset_ref, resolve_model
    from ares_cli.stages.judging import prepare_judge
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
            ref = checks.run(f"completions {plan['name']}", lambda p=plan: store.input_ref("completions", p["replay"]))
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
        loaded = checks.run(f"data {name}", lambda p=plan: load_problems(p["source"], limit=cfg.limit),
                            lambda d: f"{len(d)} problems")  # fmt: skip
        if loaded is None:
            continue
        out.loaded[name] = loaded
        if hash_inputs:
            out.inputs.append(dataset_ref(loaded.records, loaded.provenance, role=f"bench:{name}"))
    for plan in benches:
        loaded = out.loaded.get(plan["name"])
        manifest = loaded.manifest if loaded is not None else None
        plan["grader"] = cfg.grader or plan.get("grader") or (manifest and manifest.grader) or "math_verify"
        plan.setdefault("aggregate", manifest.aggregate if manifest else None)
        if loaded is None:
            continue
        checks.run(f"choice golds {plan['name']}",
                   lambda p=plan, d=loaded: check_golds(d.records, p["grader"], p["source"]))  # fmt: skip
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

