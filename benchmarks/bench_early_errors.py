"""How long ``ares rl`` takes to refuse a bad name or key on the toy world; prints JSON.

Each case is the toy command ``ares rl --model ares_cli/toy/base --data toy-train --set <case>`` run as a
fresh process: a typo in every config key that names a registered entry (``algo``, ``loss.policy_loss``,
``loss.advantage``, ``loss.aggregation``, ``kl.estimator``), a misspelled key, and a constant the chosen loss
does not read. Per case: the exit code (2 expected), whether stderr names every registered choice, wall and
CPU seconds, and the ratio to the reference in the same run: ``ares rl --help`` (the process start, Typer and
the registry, without resolving a config). ``--src`` runs another checkout's code (its ``ares_cli`` first on
the path) with ``--timeout`` seconds per case, so the same cases can be timed on an older commit:

    python benchmarks/bench_early_errors.py [--reps 2] [--src /path/to/checkout --timeout 120]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cases() -> list[tuple[str, list[str], list[str]]]:
    """(label, --set values, names the error must list)."""
    from ares_cli.algorithms.advantages import ADVANTAGES
    from ares_cli.algorithms.kl import KL_ESTIMATORS
    from ares_cli.algorithms.loss_aggregation import AGGREGATIONS
    from ares_cli.algorithms.policy_loss_core import POLICY_LOSSES
    from ares_cli.training.rl.registry import ALGORITHMS

    named = {"algo": ALGORITHMS.names(), "loss.policy_loss": POLICY_LOSSES.names(),
             "loss.advantage": ADVANTAGES.names(), "loss.aggregation": AGGREGATIONS.names(),
             "kl.estimator": list(KL_ESTIMATORS)}  # fmt: skip
    out = [
        (
            "issue command: loss.policy_loss=ppo_clipx",
            ["loss.policy_loss=ppo_clipx"],
            named["loss.policy_loss"],
        )
    ]
    out += [(f"typo in {key}", [f"{key}={names[0]}x"], names) for key, names in named.items()]
    out += [("misspelled key loss.polcy_loss", ["loss.polcy_loss=ppo"], ["loss.policy_loss"]),
            ("unread constant: algo=cispo with loss.clip_high", ["algo=cispo", "loss.clip_high=0.28"],
             ["cispo_eps_low", "cispo_eps_high"])]  # fmt: skip
    return out


def run(argv: list[str], src: Path, root: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "ARES_ARTIFACTS": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "ares_cli.main", *argv], cwd=src, env=env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
        rc, err = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        rc, err = None, ""
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"rc": rc, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "stderr": err}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--src", type=Path, default=ROOT, help="checkout whose ares_cli runs")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case before it is stopped")
    args = parser.parse_args()
    toy = ["rl", "--model", str(ROOT / "ares_cli" / "toy" / "base"), "--data", "toy-train"]
    rows, refs = [], []
    with tempfile.TemporaryDirectory(prefix="ares-early-") as tmp:
        for rep in range(args.reps):  # reference and cases alternate, so a busy machine slows both alike
            refs.append(run(["rl", "--help"], args.src, Path(tmp), args.timeout)["wall_s"])
            for i, (label, sets, names) in enumerate(cases()):
                out = run(
                    toy + [a for s in sets for a in ("--set", s)],
                    args.src,
                    Path(tmp) / f"{rep}-{i}",
                    args.timeout,
                )
                if rep == 0:
                    rows.append({"case": label, "rc": out["rc"], "names_the_choices": all(n in out["stderr"] for n in names),
                                 "error": out["stderr"].strip().splitlines()[-1][:160] if out["stderr"].strip() else None,
                                 "wall_s": [], "cpu_s": []})  # fmt: skip
                rows[i]["wall_s"].append(out["wall_s"])
                rows[i]["cpu_s"].append(out["cpu_s"])
    ref = min(refs)
    for row in rows:
        row["wall_ratio_to_help"] = round(min(row["wall_s"]) / ref, 2) if ref else None
    print(json.dumps({"src": str(args.src), "reps": args.reps, "timeout_s": args.timeout,
                      "reference_rl_help_wall_s": refs, "cases": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
