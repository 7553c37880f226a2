"""Run a seeded study: every arm (an RL recipe) once per seed from one model, then the evaluations.

    .venv/bin/python studies/run_study.py studies/mechanisms.yaml [--arms grpo,paec] [--seeds 0,1]

Jobs are ``ares rl`` / ``ares eval`` subprocesses, ``parallel`` at a time with ``threads`` torch threads each
(two one-thread runs share two cores). Seeds run in order (seed 0 of every arm first), so a study cut short
still holds complete pairs. Killing the runner loses nothing: ``ares rl`` resumes a partial artifact and
returns a finished one, so the same command picks up where it stopped. ``<out>/index.json`` maps
arm -> seed -> {"rl": id, "eval": id}; each job's output is in ``<out>/logs/``. A spec's ``val_data`` (optional)
is passed to every ``ares rl`` as ``--val-data``, for recipes that validate during the run. An arm is a recipe
path, or ``{config: PATH, set: [KEY=VALUE, ...]}`` for one reading of a recipe (each item one ``--set``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ARES = [str(Path(sys.executable).parent / "ares")]  # the console script of the running venv


def load_spec(path: Path) -> dict:
    spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in ("name", "model", "data", "seeds", "arms"):
        if key not in spec:
            raise SystemExit(f"{path}: missing key {key!r}")
    for arm, entry in spec["arms"].items():
        recipe, sets = arm_recipe(entry)
        if not (ROOT / recipe).is_file():
            raise SystemExit(f"{path}: arm {arm!r}: no recipe at {recipe}")
        if not all(isinstance(x, str) and "=" in x for x in sets):
            raise SystemExit(f"{path}: arm {arm!r}: set must be a list of KEY=VALUE strings, got {sets!r}")
    return spec


def arm_recipe(entry) -> tuple[str, list[str]]:
    """(recipe path, ``--set`` overrides) of one arm: a recipe path, or ``{config: PATH, set: [KEY=VALUE]}``."""
    if isinstance(entry, str):
        return entry, []
    if isinstance(entry, dict) and isinstance(entry.get("config"), str) and set(entry) <= {"config", "set"}:
        sets = entry.get("set", [])
        return entry["config"], list(sets) if isinstance(sets, list) else [sets]
    raise SystemExit(f"an arm is a recipe path or {{config: PATH, set: [KEY=VALUE, ...]}}, got {entry!r}")


def model_id(spec: dict) -> str:
    """The model to start from: an artifact id, or a file holding one (a pipeline's ``<stage>.id``)."""
    ref = ROOT / spec["model"]
    if ref.is_file():
        return ref.read_text(encoding="utf-8").strip()
    return spec["model"]


def _run(cmd: list[str], log: Path, threads: int) -> str:
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=fh, text=True)
    fh_out = done.stdout.strip().splitlines()
    if done.returncode != 0 or not fh_out:
        raise RuntimeError(f"{' '.join(cmd[1:])} exited {done.returncode}; see {log}")
    return fh_out[-1].strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("spec", type=Path)
    ap.add_argument("--arms", help="comma-separated subset of the spec's arms")
    ap.add_argument("--seeds", help="comma-separated subset of the spec's seeds")
    ap.add_argument("--parallel", type=int, help="jobs at a time (spec: parallel, default 2)")
    args = ap.parse_args(argv)
    spec = load_spec(args.spec)
    arms = args.arms.split(",") if args.arms else list(spec["arms"])
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(spec["seeds"])
    unknown = [a for a in arms if a not in spec["arms"]]
    if unknown:
        raise SystemExit(f"unknown arm(s) {unknown}; the spec has {list(spec['arms'])}")
    out = ROOT / spec.get("out", f"build/studies/{spec['name']}")
    index_path, lock = out / "index.json", threading.Lock()
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    threads, model = int(spec.get("threads", 1)), model_id(spec)
    ev = spec.get("eval")

    def record(arm: str, seed: int, kind: str, art: str) -> None:
        with lock:
            index.setdefault(arm, {}).setdefault(str(seed), {})[kind] = art
            tmp = index_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
            tmp.replace(index_path)

    def job(arm: str, seed: int) -> str:
        recipe, sets = arm_recipe(spec["arms"][arm])
        rl = ARES + ["-q", "rl", "-m", model, "-d", spec["data"], "--config", recipe,
                     "--set", f"seed={seed}"]  # fmt: skip
        for override in sets:
            rl += ["--set", override]
        if spec.get("val_data"):
            rl += ["--val-data", spec["val_data"]]
        art = _run(rl, out / "logs" / f"{arm}-s{seed}.rl.log", threads)
        record(arm, seed, "rl", art)
        if ev and arm in ev.get("arms", spec["arms"]):
            cmd = ARES + ["-q", "eval", "--model", art, "--bench", ev["bench"], "-k", str(ev["k"]),
                          "--seed", str(seed), "--max-new-tokens", str(ev["max_new_tokens"])]  # fmt: skip
            for key in ("limit", "temperature", "top_p"):  # optional; the eval's defaults otherwise
                if ev.get(key) is not None:
                    cmd += [f"--{key.replace('_', '-')}", str(ev[key])]
            record(arm, seed, "eval", _run(cmd, out / "logs" / f"{arm}-s{seed}.eval.log", threads))
        return f"{arm} seed {seed}: {art}"

    out.mkdir(parents=True, exist_ok=True)
    jobs = [(arm, seed) for seed in seeds for arm in arms]
    failed = 0
    with ThreadPoolExecutor(args.parallel or int(spec.get("parallel", 2))) as pool:
        futures = {pool.submit(job, arm, seed): (arm, seed) for arm, seed in jobs}
        for fut in as_completed(futures):
            try:
                print(fut.result(), flush=True)
            except RuntimeError as err:
                failed += 1
                print(f"FAILED {err}", file=sys.stderr, flush=True)
    print(f"index: {index_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
