"""``ares data check|list``: validate and summarise problem datasets; list the known manifests."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from ares_cli.commands.common import TrustGraderCode
from ares_cli.console import emit, options

app = typer.Typer(help="Problem datasets: validate and summarise, list manifests.", no_args_is_help=True)


@app.command("check")
def check_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="Manifest name, .yaml manifest, .jsonl/.json/.parquet file, or hf:org/name[:cfg][@split]."
        ),
    ],
    field_map: Annotated[
        str | None,
        typer.Option(
            "--field-map", help="Record field=source column, e.g. problem=question,answer=solution,id=index."
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Check only the first N rows.")] = None,
    grader: Annotated[
        str | None,
        typer.Option(help="Grader the golds must be readable by (default: the manifest's, else math)."),
    ] = None,
    self_grade: Annotated[
        bool, typer.Option(help="Grade each gold, boxed, against itself (worker processes).")
    ] = True,
    trust_grader_code: TrustGraderCode = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help="Prompt-token quantiles with this model's tokenizer and chat template."
        ),
    ] = None,
    skip_invalid_rows: Annotated[
        bool,
        typer.Option(
            "--skip-invalid-rows",
            help="Drop invalid rows (each listed and counted) instead of failing (exit 3).",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="JSON summary on stdout.")] = False,
) -> None:
    """Validate every row (exit 3 naming each bad row and field), summarise the dataset (rows, duplicates,
    exclusions, answer forms, prompt lengths) and warn about golds the grader cannot read (control
    characters, empty, not graded correct against themselves)."""
    from ares_cli.data.summary import check_source

    opts = options(ctx)
    if json_output and not opts.json:
        opts = dataclasses.replace(opts, json=True)
    summary = check_source(source, field_map=field_map, limit=limit, grader=grader, self_grade=self_grade,
                           trust_grader_code=bool(trust_grader_code), skip_invalid_rows=skip_invalid_rows,
                           count_tokens=(model, _prompt_tokens(model)) if model else None)  # fmt: skip
    if summary["provenance"].get("resolved"):
        opts.log(f"note: {source!r} read as the {summary['provenance']['resolved']}")
    for row in summary["skipped_invalid"]["rows"]:
        problems = "; ".join(f"{e['field'] or 'row'}: {e['message']}" for e in row["errors"])
        opts.log(f"skipped: {row['file']}:{row['row']} id {row['id']!r}: {problems}")
    if opts.verbosity >= 0:
        _print_summary(opts.console, summary)
    for w in summary["gold_check"]["warnings"]:
        opts.log(f"warning: {w['file']}:{w['row']} id {w['id']!r} field answer: {w['kind']}: {w['detail']}")
    prov = summary["provenance"]
    emit(
        opts,
        summary,
        text=f"ok: {summary['rows']} rows from {prov['path_or_id']} (sha256 {prov['sha256'][:12]})",
    )


def _prompt_tokens(model: str):
    """Each record's prompt tokens with ``model``'s tokenizer and chat template (images expanded by its
    processor), as ``ares eval`` renders them by default."""

    def count(records: list[dict]) -> list[int]:
        from ares_cli.planning.input_checks import sampling_prompt_lengths
        from ares_cli.stages.sampling import SamplingConfig

        return sampling_prompt_lengths(records, model, SamplingConfig())

    return count


@app.command("list")
def list_command(ctx: typer.Context) -> None:
    """List the dataset manifests found (repository data_manifests/ and $ARES_MANIFESTS); an invalid one
    is listed as such, with a warning naming its problem, and the others are listed as usual."""
    from ares_cli.data.manifests import list_manifests, parse_manifest
    from ares_cli.errors import InputError

    opts = options(ctx)
    entries = []
    for name, path in list_manifests().items():
        try:
            m = parse_manifest(path)
        except InputError as err:
            opts.log(f"warning: {' '.join(str(err).split())}")
            entries.append({"name": name, "source": "(invalid)", "expected_rows": None, "licence": "-",
                            "path": str(path), "error": str(err)})  # fmt: skip
            continue
        src = m.source
        where = f"hf:{src.id}" if hasattr(src, "id") else src.spec
        entries.append({"name": name, "source": where, "expected_rows": m.expected_rows, "licence": m.licence,
                        "path": str(path)})  # fmt: skip
    if not opts.json and opts.verbosity >= 0:
        from rich.table import Table

        table = Table("name", "source", "rows", "licence")
        for e in entries:
            table.add_row(e["name"], e["source"], str(e["expected_rows"] or "-"), e["licence"])
        opts.console.print(table)
    emit(opts, {"manifests": entries}, text="\n".join(e["name"] for e in entries))


def _print_summary(console, summary: dict) -> None:
    from collections import Counter

    from rich.table import Table

    table = Table(title=f"{summary['source']}: {summary['rows']} valid rows", show_header=True)
    table.add_column("property")
    table.add_column("value")
    table.add_row("sources", _counts(summary["sources"]))
    table.add_row("source rows", str(summary["source_rows"]))
    dup = summary["duplicates"] or {}
    table.add_row(
        "duplicates",
        f"{dup.get('dropped', 0)} dropped by dedup ({dup.get('conflicting_golds', 0)} with a different gold); "
        f"{summary['repeated_prompts']} repeated prompts kept",
    )
    excluded = summary["excluded"]
    table.add_row("excluded", ", ".join(f"{e['id']} ({e['reason']})" for e in excluded) or "-")
    table.add_row("skipped invalid", str(summary["skipped_invalid"]["count"]))
    table.add_row("answer types", _counts(summary["answer_types"]))
    table.add_row("answer forms", _counts(summary["answer_forms"]))
    table.add_row("difficulty", _counts(summary["difficulty"]) or "-")
    for key in ("problem_chars", "answer_chars"):
        s = summary[key]
        table.add_row(
            key.replace("_", " "), f"min {s['min']}  mean {s['mean']}  median {s['median']}  max {s['max']}"
        )
    q = summary["problem_chars_quantiles"]
    table.add_row("problem chars p50/p90/p99", f"{q['p50']} / {q['p90']} / {q['p99']}")
    if summary["prompt_tokens"]:
        t = summary["prompt_tokens"]
        table.add_row(
            "prompt tokens",
            f"min {t['min']}  p50 {t['p50']}  p90 {t['p90']}  p99 {t['p99']}  max {t['max']}  ({t['model']})",
        )
    table.add_row("with images", str(summary["with_images"]))
    im = summary["image_stats"]
    if im["images"]:
        table.add_row(
            "images",
            f"{im['images']} ({im['per_record']['min']}-{im['per_record']['max']} per record), width "
            f"{im['width']['min']}-{im['width']['max']} px, height {im['height']['min']}-{im['height']['max']} px",
        )
    table.add_row("meta keys", ", ".join(summary["meta_keys"]) or "-")
    prov = summary["provenance"]
    table.add_row(
        "provenance", json.dumps({k: prov.get(k) for k in ("kind", "name", "path_or_id", "revision")})
    )
    table.add_row("sha256", prov["sha256"])
    gold = summary["gold_check"]
    kinds = _counts(dict(Counter(w["kind"] for w in gold["warnings"])))
    table.add_row(
        "gold warnings",
        f"{len(gold['warnings'])} (grader {gold['grader']})" + (f": {kinds}" if kinds else ""),
    )
    console.print(table)


def _counts(counts: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items())
