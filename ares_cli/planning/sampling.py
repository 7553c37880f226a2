"""``ares plan passrate`` and ``ares plan eval``: the stages' own preparation (collecting), the plan-only
checks (model shapes, tokenizer, images, gold answers against the grader, prompt lengths per source) and
the generation estimate per GPU.

The estimate (:func:`estimate_sampling`, pure): vLLM (``generation/vllm_backend.py``) takes
``gpu_memory_utilization`` 0.9 of the GPU (less a model judge's ``judge.gpu_memory_utilization`` when one
runs beside it: ``sampling.gpu_shares``) and, with no ``max_model_len`` given, serves the model's whole
context: it must hold the 16-bit weights and the KV cache of one sequence of that length. The hf backend
holds 16-bit weights (bf16 on CUDA), the KV cache of ``batch_size`` rows at the longest prompt +
``max_new_tokens`` and the sampling logits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ares_cli.errors import UsageError
from ares_cli.planning import input_checks, memory
from ares_cli.planning.memory import GIB, VLLM_OVERHEAD, Term
from ares_cli.planning.report import PlanReport
from ares_cli.planning.shapes import ModelShape
from ares_cli.planning.target import Estimate, Target, check_budget
from ares_cli.stages.checklist import Checklist

VLLM_UTILIZATION = 0.9  # VLLMBackend's default gpu_memory_utilization (passrate and eval keep it)
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
    shape = input_checks.model_checks(checks, model_path)
    records, lengths = [], []
    for grader in dict.fromkeys(g for _, _, g in datasets):
        pool = input_checks.gold_pool(
            checks, grader, workers=cfg.grade_workers, timeout_s=cfg.grade_timeout_s
        )
        try:
            for name, loaded, _ in (d for d in datasets if d[2] == grader):
                input_checks.check_images(checks, f"images ({name})", loaded.records, loaded.locations)
                if shape is not None:
                    found = checks.run(f"prompt lengths ({name})",
                                       lambda d=loaded: input_checks.sampling_prompt_lengths(d.records, model_path, cfg))  # fmt: skip
                    if found is not None:
                        records += loaded.records
                        lengths += found
                if pool is not None:
                    input_checks.check_gold_self_grades(checks, f"gold answers ({name})", loaded, pool)
        finally:
            if pool is not None:
                pool.close()
    if cfg.backend == "replay":
        checks.ok("backend", "replay: completions are read, nothing is generated")
        return
    backend, how = input_checks.planned_backend(cfg.backend)
    checks.ok("backend", how)
    if shape is None or not lengths or cfg.max_new_tokens is None:  # no budget resolved: nothing to size
        return
    over = (shape.context - cfg.max_new_tokens) if shape.context else None
    report.facts["prompts per source"] = input_checks.source_table(
        records, lengths, drop_over=None, context_over=over
    )
    fitting = [n for n in lengths if over is None or n <= over] or lengths
    facts = SamplingFacts(samples=samples, longest_prompt=max(fitting), mean_prompt=sum(fitting) / len(fitting),
                          backend=backend)  # fmt: skip
    report.estimate = estimate_sampling(cfg, shape, target, facts)


# The estimate (pure): per-GPU generation memory, and the tokens of the whole run.
@dataclass(frozen=True)
class SamplingFacts:
    samples: int  # problems x K, over every benchmark
    longest_prompt: int
    mean_prompt: float
    backend: str  # vllm | hf on the GPU machine


def estimate_sampling(cfg, shape: ModelShape, target: Target, facts: SamplingFacts) -> Estimate:
    """Generation memory per GPU, and the tokens of the whole run (every sample at the budget)."""
    per_token = memory.kv_cache_bytes(shape, 1, 1, 2)
    longest = facts.longest_prompt + cfg.max_new_tokens
    weights = Term("weights", 2 * shape.params, "exact", "16-bit")
    if facts.backend == "vllm":
        from ares_cli.stages.sampling import gpu_shares

        utilization, judge = gpu_shares(cfg)
        share = int(target.gpu_memory * utilization)
        max_len = shape.context or longest
        kv = max(0, share - weights.bytes - VLLM_OVERHEAD)
        terms = [weights, Term("vLLM allowance", VLLM_OVERHEAD, "assumed", "CUDA graphs, sampler, profile run"),
                 Term("KV cache (one max_model_len sequence)", per_token * max_len, "exact",
                      f"{max_len} tokens (the model's context) x {per_token:,} bytes")]  # fmt: skip
        how = f"gpu_memory_utilization {utilization:g}" + (
            f" ({VLLM_UTILIZATION:g} less the model judge's judge.gpu_memory_utilization {judge:g})"
            if judge
            else ""
        )
        est = Estimate(terms=terms, budget=share, budget_how=how)
        est.notes.append(f"KV cache holds {kv // per_token:,} tokens: {kv // per_token // max(1, longest)} "
                         f"sequences of {longest} tokens at once")  # fmt: skip
    else:
        rows = cfg.batch_size
        terms = [weights,
                 Term("KV cache", memory.kv_cache_bytes(shape, rows, longest, 2), "exact",
                      f"{rows} rows x {longest} tokens"),
                 Term("prefill + sampling", rows * facts.longest_prompt * 3 * shape.intermediate * 2
                      + 2 * rows * shape.vocab * 4, "estimate", "one MLP's temporaries over the prompts, logits")]  # fmt: skip
        terms.append(memory.framework_allowance(memory.total(terms)))
        est = Estimate(terms=terms, budget=target.gpu_memory, budget_how=f"{target.gpu_memory / GIB:.0f} GiB")
    check_budget(est, f"{facts.backend} generation")
    est.tokens_per_step = int(facts.samples * (facts.mean_prompt + cfg.max_new_tokens))
    est.tokens_how = (f"{facts.samples} samples x (mean prompt {facts.mean_prompt:.0f} + max_new_tokens "
                      f"{cfg.max_new_tokens}): the whole run, an upper bound")  # fmt: skip
    if target.throughput:
        est.seconds_per_step = est.tokens_per_step / (target.throughput * target.world)
    return est
