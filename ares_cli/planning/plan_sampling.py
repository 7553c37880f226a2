"""``ares plan passrate`` and ``ares plan eval``: the stages' own preparation (collecting), the plan-only
checks (model shapes, tokenizer, images, gold answers against the grader, prompt lengths per source) and
the generation estimate per GPU.
"""

from __future__ import annotations

from dataclasses import replace

from ares_cli.errors import UsageError
from ares_cli.planning import data_checks
from ares_cli.planning.estimate_sampling import SamplingFacts, estimate_sampling
from ares_cli.planning.plan_rl import model_checks, planned_backend
from ares_cli.planning.report import PlanReport
from ares_cli.planning.target import Target
from ares_cli.stages.checklist import Checklist

SAMPLING_FLAGS = ("k", "backend", "temperature", "top_p", "max_new_tokens", "seed", "system_prompt",
                  "prompt_template", "limit", "grader")  # fmt: skip


def plan_passrate(opts, args: dict, target: Target, *, resolve_config) -> PlanReport:
    """The plan of ``ares passrate`` with the command's ``args``; ``resolve_config`` is the command's own
    option-to-config resolution (``commands/passrate.py``)."""
    from ares_cli.stages.passrate import prepare_passrate
    from ares_cli.store.artifacts import ArtifactStore

    checks = Checklist(collect=True)
    report = PlanReport("passrate", target, checks.results)
    if args["data"] is None:
        checks.fail("options", UsageError("--data is required"))
    flags = {k: args[k] for k in (*SAMPLING_FLAGS, "shard")}
    cfg = checks.run("config", lambda: resolve_config(config=args["config"], set_=args["set_"], **flags))
    if cfg is None or args["data"] is None:
        return report
    prepared = prepare_passrate(ArtifactStore(opts.artifacts_root), model=args["model"], data=args["data"],
                                cfg=cfg, checks=checks, hash_inputs=False)  # fmt: skip
    grader = (prepared.cfg or cfg).grader  # with the data manifest's grading options
    datasets = [("data", prepared.loaded, grader)] if prepared.loaded is not None else []
    _sampling_report(report, checks, prepared.cfg, prepared.model_path, datasets, target,
                     samples=len(prepared.problems or ()) * cfg.k)  # fmt: skip
    return report


def plan_eval(opts, args: dict, target: Target, *, command) -> PlanReport:
    """The plan of ``ares eval`` with the command's ``args``; ``command`` is the command module, whose
    ``eval_flags``, ``suite_spec`` and ``resolve_config`` turn the options into configs."""
    from ares_cli.stages.prepare_eval import prepare_eval
    from ares_cli.store.artifacts import ArtifactStore

    checks = Checklist(collect=True)
    report = PlanReport("eval", target, checks.results)
    flags = command.eval_flags(bench=args["bench"], **{k: args[k] for k in SAMPLING_FLAGS})
    replay = args["from_samples"] or args["regrade"]
    spec = None
    if args["suite"] is not None:
        spec = checks.run("suite", lambda: command.suite_spec(args["suite"], model=args["model"], bench=args["bench"],
                          data=args["data"], replay=replay, flags=flags), lambda s: f"{len(s.benches)} benchmarks")  # fmt: skip
        if spec is None:
            return report
    cfg = checks.run("config", lambda: command.resolve_config(config=args["config"], set_=args["set_"],
                     flags=flags, base=spec.eval if spec is not None else None))  # fmt: skip
    if cfg is None:
        return report
    configs = (
        [cfg] if spec is None else [replace(cfg, benches=[f"{b.bench}:{b.k}"], k=b.k) for b in spec.benches]
    )
    store = ArtifactStore(opts.artifacts_root)
    datasets, samples, model_path = [], 0, None
    for bench_cfg in configs:
        prepared = prepare_eval(store, model=args["model"], cfg=bench_cfg, data=args["data"],
                                from_samples=args["from_samples"], regrade=args["regrade"],
                                difficulty_ref=args["difficulty_from"], checks=checks, hash_inputs=False)  # fmt: skip
        model_path = model_path or prepared.model_path
        for plan in prepared.benches or ():
            loaded = prepared.loaded.get(plan["name"])
            if loaded is not None:
                datasets.append((plan["name"], loaded, plan["grader"]))
                samples += len(prepared.kept.get(plan["name"], loaded.records)) * plan["k"]
        cfg = prepared.cfg
    _sampling_report(report, checks, cfg, model_path, datasets, target, samples=samples)
    return report


def _sampling_report(report: PlanReport, checks: Checklist, cfg, model_path, datasets, target: Target, *,
                     samples: int) -> None:  # fmt: skip
    """Shapes and tokenizer, each dataset's images and golds, the backend, prompt lengths, the estimate."""
    shape = model_checks(checks, model_path)
    records, lengths = [], []
    for grader in dict.fromkeys(g for _, _, g in datasets):
        pool = data_checks.gold_pool(checks, grader, workers=cfg.grade_workers, timeout_s=cfg.grade_timeout_s)
        try:
            for name, loaded, _ in (d for d in datasets if d[2] == grader):
                data_checks.check_images(checks, f"images ({name})", loaded.records, loaded.locations)
                if shape is not None:
                    found = checks.run(f"prompt lengths ({name})",
                                       lambda d=loaded: data_checks.sampling_prompt_lengths(d.records, model_path, cfg))  # fmt: skip
                    if found is not None:
                        records += loaded.records
                        lengths += found
                if pool is not None:
                    data_checks.check_golds(checks, f"gold answers ({name})", loaded, pool)
        finally:
            if pool is not None:
                pool.close()
    if cfg.backend == "replay":
        checks.ok("backend", "replay: completions are read, nothing is generated")
        return
    backend, how = planned_backend(cfg.backend)
    checks.ok("backend", how)
    if shape is None or not lengths or cfg.max_new_tokens is None:  # no budget resolved: nothing to size
        return
    over = (shape.context - cfg.max_new_tokens) if shape.context else None
    report.facts["prompts per source"] = data_checks.source_table(
        records, lengths, drop_over=None, context_over=over
    )
    fitting = [n for n in lengths if over is None or n <= over] or lengths
    facts = SamplingFacts(samples=samples, longest_prompt=max(fitting), mean_prompt=sum(fitting) / len(fitting),
                          backend=backend)  # fmt: skip
    report.estimate = estimate_sampling(cfg, shape, target, facts)
