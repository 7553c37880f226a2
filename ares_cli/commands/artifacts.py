"""``ares artifacts ls|show|lineage|verify``: inspect what is on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ares_cli.console import emit, options
from ares_cli.errors import AresError, IntegrityError
from ares_cli.store.artifacts import ArtifactStore

app = typer.Typer(
    help="Inspect stored artifacts: list, show manifests, trace lineage, verify hashes.", no_args_is_help=True
)

ArtifactRef = Annotated[str, typer.Argument(help="Artifact id (or unique prefix) or directory.")]


@app.command("ls")
def ls_command(
    ctx: typer.Context,
    stage: Annotated[str | None, typer.Option(help="Only this stage.")] = None,
) -> None:
    """List artifacts, newest first (partial ones included)."""
    opts = options(ctx)
    entries = ArtifactStore(opts.artifacts_root).list(stage)
    for e in entries:
        if e["status"] == "corrupt":
            opts.log(f"warning: {e['error']}", level=-1)
    if not opts.json:
        from rich.table import Table

        table = Table("artifact", "status", "created", "rows", "bytes")
        for e in entries:
            table.add_row(
                e["artifact_id"],
                e["status"],
                e["created"] or "-",
                str(e.get("rows", "-")),
                str(e.get("bytes", "-")),
            )
        opts.console.print(table)
    emit(opts, {"artifacts": entries}, text="\n".join(e["path"] for e in entries))


@app.command("show")
def show_command(ctx: typer.Context, ref: ArtifactRef) -> None:
    """Print an artifact's manifest (JSON on stdout)."""
    opts = options(ctx)
    manifest = ArtifactStore(opts.artifacts_root).manifest(ref)
    emit(opts, manifest, text=json.dumps(manifest, indent=2, sort_keys=True))


@app.command("lineage")
def lineage_command(ctx: typer.Context, ref: ArtifactRef) -> None:
    """Show the tree of inputs an artifact was built from."""
    opts = options(ctx)
    tree = ArtifactStore(opts.artifacts_root).lineage(ref)
    emit(opts, tree, text="\n".join(_tree_lines(tree)))


def _tree_lines(node: dict, indent: str = "") -> list[str]:
    lines = [f"{indent}{node['artifact_id']}"] if indent == "" else []
    for item in node["inputs"]:
        label = item.get("artifact_id") or f"{item['path']} (sha256 {item['sha256'][:12]})"
        if item.get("missing"):
            label += " [missing]"
        if item.get("corrupt"):
            label += " [corrupt manifest]"
        lines.append(f"{indent}└─ {item['role']}: {label}")
        if item.get("inputs"):
            lines.extend(_tree_lines(item, indent + "   "))
    return lines


@app.command("verify")
def verify_command(
    ctx: typer.Context,
    refs: Annotated[list[str], typer.Argument(help="Artifacts to verify; all when omitted.")] = None,
) -> None:
    """Re-hash every file of the artifacts; exit 4 naming each file that does not match.

    A corrupt or failing artifact is reported and the others are still verified; the exit code comes last.
    """
    opts = options(ctx)
    store = ArtifactStore(opts.artifacts_root)
    targets = refs or [e["path"] for e in store.list() if e["status"] in ("complete", "corrupt")]
    results, failures = [], []
    for ref in targets:
        try:
            results.append(store.verify(ref))
        except AresError as err:
            failures.append(err)
            opts.log(f"error: {err}", level=-1)
            results.append({"artifact_id": Path(str(ref)).name, "status": "failed", "error": str(err)})
    emit(
        opts,
        {"verified": results},
        text="\n".join(
            f"{r['artifact_id']}: " + (f"ok ({r['files']} files)" if r["status"] == "ok" else "FAILED")
            for r in results
        ),
    )
    if failures:
        if not any(isinstance(err, IntegrityError) for err in failures):
            raise failures[0]  # e.g. an unknown id (exit 3)
        raise IntegrityError(
            f"{len(failures)} of {len(targets)} artifact(s) failed verification (listed above)"
        )
