"""PAEC's two H̄ scopes on the toy recipe (docs/results.md, docs/methods.md): how often the penalty gate opens.

    .venv/bin/python studies/paec_scope.py [--model ID] [--out build/studies/paec-scope]

Runs ``pipelines/rl/toy-paec.yaml`` with four optimiser steps per RL step (``optim.mini_batch_size=4``), 12
steps, seed 0, once per reading of ``paec.hbar_scope`` ("step", "minibatch"), from the demo's length-targeted
SFT model, and writes ``summary.json``: per reading, the share of optimiser steps with the gate open
(``paec/penalty_active`` averaged over the run; each RL step logs the mean over its optimiser steps), the RL
steps where it opened, and the run's H_low. A killed run resumes (``ares rl`` picks up its partial artifact).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "studies"))

from run_study import ARES, _run  # noqa: E402

SCOPES = ("step", "minibatch")
SETTINGS = ["steps=12", "optim.mini_batch_size=4", "val.every=0", "seed=0"]


def summarize(rows: list[dict]) -> dict:
    """The gate's activity over one run's metric rows (one row per RL step)."""
    active = [float(r["paec/penalty_active"]) for r in rows]
    h_low = [r["paec/h_low"] for r in rows if r.get("paec/h_low") is not None]
    return {
        "steps": len(rows),
        "optimiser_steps_gate_open": sum(active) / len(active),
        "rl_steps_gate_open": [int(r["step"]) for r, a in zip(rows, active, strict=True) if a > 0],
        "h_low": h_low[-1] if h_low else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="an SFT artifact (default: build/pipelines/toy/sft_length.id's)")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "studies" / "paec-scope")
    args = ap.parse_args(argv)
    model = args.model or (ROOT / "build/pipelines/toy/sft_length.id").read_text(encoding="utf-8").strip()
    from ares_cli.report.figure_helpers import read_rows
    from ares_cli.store.artifacts import verify_enclosing

    summary = {"model": model, "recipe": "pipelines/rl/toy-paec.yaml", "settings": SETTINGS, "scopes": {}}
    for scope in SCOPES:
        cmd = ARES + ["-q", "rl", "-m", model, "-d", "toy-train", "--config", "pipelines/rl/toy-paec.yaml",
                      *(x for s in [*SETTINGS, f"paec.hbar_scope={scope}"] for x in ("--set", s))]  # fmt: skip
        art = ROOT / _run(cmd, args.out / "logs" / f"{scope}.rl.log", threads=1)
        verify_enclosing(art)
        summary["scopes"][scope] = {
            "rl": str(art.relative_to(ROOT)),
            **summarize(read_rows(art / "metrics.jsonl")),
        }
        print(f"{scope}: {summary['scopes'][scope]}", flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
