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


BENCH_TABLES: dict[str, dict[str, Callable[[dict], list[str]]]] = {
    "bench/memory.json": {"table": memory_table},
    "bench/token_stats.json": {"speed": token_stats_table},
    "bench/padding.json": {"table": padding_table},
    "bench/padding-128.json": {"table": padding_budgets_table},
}
