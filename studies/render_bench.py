"""The benchmark tables of docs/performance.md, rendered from the stored benchmark JSON in studies/results/bench/.

Each entry of :data:`BENCH_TABLES` maps a stored file (``bench/memory.json``: what one run of
``benchmarks/bench_memory.py`` printed) and a part name to a function that turns the JSON into the doc's
table lines; ``studies/render_results.py`` registers them beside its study tables, so a marker
``<!-- results: bench/memory.json#table -->`` in docs/performance.md is checked and rewritten like any other.
"""

from __future__ import annotations

from collections.abc import Callable


def _num(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def _ratio(value: float) -> str:
    """A time ratio with three significant figures at most (0.82, 2.92, 38.6, 213)."""
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _row(*cols: str) -> str:
    return "| " + " | ".join(cols) + " |"


def memory_table(report: dict) -> list[str]:
    """bench_memory.py: peak extra RSS of one RL micro-step, fused against logits, per response length."""
    lines = [
        "| response tokens | fused peak (MiB) | logits peak (MiB) | fp32 logits alone (MiB) |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in report["results"]:
        if "logits_peak_extra_mib" in row:
            logits = _num(row["logits_peak_extra_mib"], 1)
        else:  # "needs ~13.9 GiB > limit 8.9 GiB": the estimate is the property of the size, the limit of the run
            logits = f"skipped ({row['logits_skipped'].split(' > ')[0]})"
        lines.append(
            _row(
                _num(row["response_tokens"], 0),
                _num(row["fused_peak_extra_mib"], 1),
                logits,
                _num(row["logits_fp32_mib"], 0),
            )
        )
    return lines


TOKEN_STATS_ROWS = (  # (vocabulary, logits family, tokens), in the doc's order
    (152064, "peaked", 256),
    (152064, "peaked", 1024),
    (152064, "flat", 256),
    (32768, "peaked", 256),
    (32768, "flat", 256),
)
LOGITS_LABEL = {"peaked": "peaked", "flat": "flat (nucleus capped at 10,000)"}


def token_stats_table(report: dict) -> list[str]:
    """bench_token_stats.py: time of token_stats and of the sort-based reference, as ratios to logsumexp."""
    found = {(r["vocab"], r["logits"], r["tokens"]): r for r in report["results"]}
    lines = [
        "| vocabulary | logits | tokens | token_stats / logsumexp | float32 sort-based reference |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for key in TOKEN_STATS_ROWS:
        if key not in found:
            raise ValueError(
                f"bench/token_stats.json: no result for vocab {key[0]}, {key[1]}, {key[2]} tokens"
            )
        row = found[key]
        naive = row.get("naive_time_ratio_to_logsumexp")
        lines.append(
            _row(
                _num(key[0], 0),
                LOGITS_LABEL[key[1]],
                _num(key[2], 0),
                _ratio(row["token_stats_time_ratio_to_logsumexp"]),
                "—" if naive is None else _ratio(naive),
            )
        )
    return lines


def _padding_row(label: str, mode: dict, first: bool) -> str:
    return _row(
        label,
        str(mode["micro_batches"]),
        f"{mode['padded_fraction']:.3f}",
        f"{mode['update_s']:.2f} s",
        "1" if first else f"{mode['time_ratio_to_rows']:.2f}",
    )


def _padding_table(report: dict, ratio_header: str, labels: list[tuple[str, str]]) -> list[str]:
    modes = report["modes"]
    lines = [
        f"| mode | micro-batches | padded fraction | update time | {ratio_header} |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for k, (key, label) in enumerate(labels):
        if key not in modes:
            raise ValueError(f"bench padding report: no mode '{key}'")
        lines.append(_padding_row(label, modes[key], first=k == 0))
    return lines


def padding_table(report: dict) -> list[str]:
    """bench_padding.py at its defaults: rows, the token budget of row mode's largest micro-batch, packed."""
    return _padding_table(
        report,
        "ratio to rows",
        [
            ("rows", "4 rows (batch order)"),
            ("token_budget", "token budget, sorted by length"),
            ("packed", "token budget, packed"),
        ],
    )


def padding_budgets_table(report: dict) -> list[str]:
    """bench_padding.py at a shorter response budget: every mode, fixed budgets and ``auto`` included."""
    budget = _num(report["token_budget"], 0)
    return _padding_table(
        report,
        "ratio to 4 rows",
        [
            ("rows", "4 rows (the old default)"),
            ("one_micro_batch", f"all {report['sequences']} rows in one micro-batch"),
            ("token_budget", f"token budget {budget}"),
            ("budget_1024", "token budget 1,024"),
            ("budget_2048", "token budget 2,048"),
            ("budget_4096", "token budget 4,096"),
            ("auto (default)", "`auto` (default)"),
            ("packed", f"packed, budget {budget}"),
        ],
    )


def auto_budget_table(report: dict) -> list[str]:
    """bench_padding.py --micro N: the default ``auto`` budget against each fixed one and the old rule (one
    micro-batch of ``micro_batch_size`` rows), as ratios to the fastest fixed budget of the same run."""
    modes, rows = report["modes"], report["micro_batch_rows"]
    fixed = {k: m for k, m in modes.items() if k.startswith("budget_")}
    best = min(m["update_s"] for m in fixed.values())
    lines = [
        "| mode | micro-batches | padded fraction | update time | ratio to the fastest fixed budget |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    labelled = [("auto (default)", "`auto` (default)")]
    labelled += [
        (k, f"token budget {_num(int(k.split('_')[1]), 0)}") for k in sorted(fixed, key=lambda k: int(k[7:]))
    ]
    labelled.append(("rows", f"{rows} rows (the old rule)"))
    for key, label in labelled:
        m = modes[key]
        lines.append(_row(label, str(m["micro_batches"]), f"{m['padded_fraction']:.3f}", f"{m['update_s']:.3f} s",
                          f"{m['update_s'] / best:.2f}"))  # fmt: skip
    return lines


def rl_vs_trl_table(report: dict) -> list[str]:
    """bench_rl_vs_trl.py: each model's median step, generation and training time on both sides, their ratios,
    the per-rep step ratios and the paired response-length difference (same prompts, same steps)."""
    lines = [
        "| model | ares step | TRL step | step ratio (per rep) | generation | training | per token "
        "| response tokens, ares − TRL |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, m in report["models"].items():
        per_rep = ", ".join(f"{r:.2f}" for r in m["step_ratio_per_rep"])
        diff = m["response_len_diff_ares_minus_trl"]
        lines.append(_row(name, f"{m['median_s']['ares']['step']:.2f} s", f"{m['median_s']['trl']['step']:.2f} s",
                          f"{m['ratio_ares_to_trl']['step']:.3f} ({per_rep})", f"{m['ratio_ares_to_trl']['generate']:.2f}",
                          f"{m['ratio_ares_to_trl']['train']:.2f}", f"{m['step_per_token_ratio']:.2f}",
                          f"{diff['mean']:+.2f} ± {diff['se']:.2f}"))  # fmt: skip
    return lines


def grading_overlap_table(report: dict) -> list[str]:
    """bench_grading_overlap.py: exposed grading and step time, grading after generation against overlapped,
    per decode-batch size (one row each), with the grading delay the run added per sample."""
    delay = report["grade_delay_ms"]
    grader = "`math_verify` on the toy's answers" if not delay else f"`math_verify` + {delay:g} ms per sample"
    lines = [
        "| grader | rows per decode batch | exposed grading, after → overlap | step, after → overlap | ratio "
        "| metrics identical |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for size, m in report["by_batch_size"].items():
        after, over = m["median_s"]["after"], m["median_s"]["overlap"]
        reps = ", ".join(f"{r:.2f}" for r in m["step_ratio_per_rep"])
        lines.append(_row(grader, f"{size} ({m['decode_batches_per_step']} batch{'es' if m['decode_batches_per_step'] != 1 else ''})",
                          f"{after['grade']:.3f} → {over['grade']:.3f} s", f"{after['step']:.2f} → {over['step']:.2f} s",
                          f"{m['ratio_overlap_to_after']['step']:.2f} ({reps})", "yes" if m["metrics_identical"] else "no"))  # fmt: skip
    return lines


def decode_cache_table(report: dict) -> list[str]:
    """bench_decode_cache.py: the preallocated KV cache against transformers' growing one, per model."""
    lines = [
        "| model | tokens | preallocated (median) | growing `DynamicCache` (median) | ratio | tokens and log-probs identical |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, m in report["models"].items():
        same = "yes" if m["identical_tokens"] and m["identical_logprobs"] else "no"
        lines.append(_row(name, _num(m["tokens"], 0), f"{m['median_s']['preallocated']:.3f} s",
                          f"{m['median_s']['dynamic']:.3f} s", f"{m['ratio_preallocated_to_dynamic']:.2f}", same))  # fmt: skip
    return lines


def sync_memory_table(report: dict) -> list[str]:
    """bench_sync_memory.py: the bytes held whole on a rank during the vLLM weight sync under ZeRO-3."""
    lines = [
        "| model | ranks × syncs | parameters | policy (bytes) | largest parameter (bytes) "
        "| whole before a sync | peak extra during a sync |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    model = f"toy-shaped Llama, hidden {report['hidden']}, {report['layers']} layers"
    lines.append(_row(model, f"{report['ranks']} × {report['syncs'] // report['ranks']}",
                      _num(report["parameters"], 0), _num(report["policy_bytes"], 0),
                      _num(report["largest_parameter_bytes"], 0), _num(report["held_before_sync_bytes"], 0),
                      _num(report["peak_extra_bytes"], 0)))  # fmt: skip
    return lines


ZERO3_PATHS = {"whole": "built whole (before)", "partitioned": "built partitioned, `zero.Init` (now)"}


def zero3_load_table(report: dict) -> list[str]:
    """bench_zero3_load.py: parameter bytes each rank holds after loading under ZeRO-3 and after
    ``deepspeed.initialize`` (exact), and the growth of its peak resident set (MiB), per path and rank."""
    lines = [
        "| load path | rank | parameter bytes after the load | after `initialize` | peak RSS growth: load "
        "| load + `initialize` |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["rows"]:
        lines.append(_row(ZERO3_PATHS[row["path"]], str(row["rank"]), _num(row["held_after_load_bytes"], 0),
                          _num(row["held_after_initialize_bytes"], 0), f"{_num(row['peak_rss_load_mib'], 0)} MiB",
                          f"{_num(row['peak_rss_start_mib'], 0)} MiB"))  # fmt: skip
    return lines


BENCH_TABLES: dict[str, dict[str, Callable[[dict], list[str]]]] = {
    "bench/memory.json": {"table": memory_table},
    "bench/token_stats.json": {"speed": token_stats_table},
    "bench/padding.json": {"table": padding_table},
    "bench/padding-128.json": {"table": padding_budgets_table},
    "bench/auto-budget.json": {"table": auto_budget_table},
    "bench/rl-vs-trl.json": {"table": rl_vs_trl_table},
    "bench/grading-overlap.json": {"table": grading_overlap_table},
    "bench/grading-overlap-30ms.json": {"table": grading_overlap_table},
    "bench/decode-cache.json": {"table": decode_cache_table},
    "bench/sync-memory.json": {"table": sync_memory_table},
    "bench/zero3-load.json": {"table": zero3_load_table},
}
