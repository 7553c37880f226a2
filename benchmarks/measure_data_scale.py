"""``ares data check`` and ``ares plan rl`` on DAPO-Math-17k at the hub's size: wall time and peak RSS.

The hub's DAPO-Math-17k holds 1,791,700 rows: 17,917 unique prompts, each repeated 100 times (DAPO issue
#36, verl issue #3065). This writes a file of that size in the hub's layout (``data/dapo-math-17k.parquet``
with the columns data_source, prompt [list of {content, role}], ability, reward_model {ground_truth,
style} and extra_info {index}; generated problems, DAPO's own ``Answer:`` instruction around each) under a
scratch directory, points a copy of the code tree's own ``dapo-math-17k`` manifest at it (its hub id
replaced by the local folder, read by the same ``datasets`` loader), and runs the two commands of that
tree as subprocesses, one at a time. Peak RSS is the largest resident set of the command's process tree,
sampled every 0.2 s (grading workers included), and CPU seconds of that tree (user + system; the wall
time of a loaded machine says less than the CPU time); a run over ``--max-rss-gib`` or ``--timeout-s`` is killed
and reported as such (``"killed"``), its numbers up to then kept.

    nice -n 10 python benchmarks/measure_data_scale.py --tree . --scratch /tmp/dapo-scale [--rows 1791700]
    # the code before a change: git archive <sha> | tar -x -C /tmp/ares-before; --tree /tmp/ares-before

Never write the generated file inside the repository: it is about 0.3 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

UNIQUE = 17_917
HUB_ROWS = 1_791_700
DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


def problem_text(i: int) -> tuple[str, str]:
    """A generated competition-style problem with an integer answer (deterministic in ``i``)."""
    a, b, c = 3 + i % 97, 5 + (i * 7) % 89, 2 + (i * 13) % 31
    text = (
        f"Let $f(x) = {a}x^2 + {b}x + {c}$ and let $S_{{{i}}}$ be the set of integers $n$ with "
        f"$1 \\le n \\le {100 + i % 900}$ such that $f(n)$ is divisible by ${c + 1}$. Find the number of "
        f"elements of $S_{{{i}}}$, plus the remainder when $f({i % 50})$ is divided by $1000$."
    )
    count = sum(1 for n in range(1, 101 + i % 900) if (a * n * n + b * n + c) % (c + 1) == 0)
    return text, str(count + (a * (i % 50) ** 2 + b * (i % 50) + c) % 1000)


def write_dataset(scratch: Path, rows: int) -> Path:
    """``scratch/hub/data/dapo-math-17k.parquet``: ``rows`` rows cycling over the 17,917 unique prompts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    hub = scratch / "hub"
    target = hub / "data" / "dapo-math-17k.parquet"
    if target.is_file() and pq.ParquetFile(target).metadata.num_rows == rows:
        return hub
    target.parent.mkdir(parents=True, exist_ok=True)
    unique = min(UNIQUE, rows)
    problems = [problem_text(i) for i in range(unique)]
    block = pa.table({
        "data_source": ["math_dapo"] * unique,
        "prompt": [[{"content": DAPO_TEMPLATE.format(problem=p), "role": "user"}] for p, _ in problems],
        "ability": ["MATH"] * unique,
        "reward_model": [{"ground_truth": g, "style": "rule-lighteval/MATH_v2"} for _, g in problems],
        "extra_info": [{"index": f"{i:08x}-0000-4000-8000-{i:012x}"} for i in range(unique)],
    })  # fmt: skip
    repeats, rest = divmod(rows, unique)
    table = pa.concat_tables([block] * repeats + ([block.slice(0, rest)] if rest else []))
    pq.write_table(table, target, row_group_size=65_536)
    return hub


def manifest_copy(tree: Path, hub: Path, scratch: Path, rows: int) -> Path:
    """The tree's ``dapo-math-17k`` manifest with its hub id replaced by the local folder ``hub`` (and no
    row count to expect when ``rows`` is not the hub's)."""
    import yaml

    doc = yaml.safe_load((tree / "data_manifests" / "dapo-math-17k.yaml").read_text())
    doc["source"]["hf"]["id"] = str(hub)
    doc["source"]["hf"].pop("revision", None)
    if rows != HUB_ROWS:
        doc.pop("expected_rows", None)
    out = scratch / "manifests" / tree.resolve().name / "dapo-math-17k.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def tree_usage(pid: int) -> tuple[int, float]:
    """Resident set (KiB) and CPU seconds (user + system, exited children included) of ``pid`` and all its
    descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        ppid = int(fields[1])
        children.setdefault(ppid, []).append(int(entry.name))
        cpu[int(entry.name)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[int(entry.name)] = int(line.split()[1])
    total, seconds, todo = 0, 0.0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        seconds += cpu.get(p, 0.0)
        todo += children.get(p, [])
    return total, seconds


def run(cmd: list[str], env: dict[str, str], *, timeout_s: float, max_rss_gib: float) -> dict:
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, cpu_s, killed = 0, 0.0, None
    while proc.poll() is None:
        rss, seconds = tree_usage(proc.pid)
        peak, cpu_s = max(peak, rss), max(cpu_s, seconds)
        elapsed = time.perf_counter() - started
        if elapsed > timeout_s or peak > max_rss_gib * 2**20:
            killed = f"over {timeout_s:.0f} s" if elapsed > timeout_s else f"over {max_rss_gib} GiB RSS"
            subprocess.run(["pkill", "-KILL", "-P", str(proc.pid)], check=False)
            proc.kill()
            break
        time.sleep(0.2)
    out, err = proc.communicate()
    return {"cmd": " ".join(cmd[3:]), "exit": proc.returncode, "wall_s": round(time.perf_counter() - started, 1),
            "cpu_s": round(cpu_s, 1), "peak_rss_gib": round(peak / 2**20, 2), "killed": killed, "stdout_tail": out[-600:],
            "stderr_tail": err[-1500:]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, required=True, help="Code tree to measure (its ares_cli/).")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/dapo-scale"))
    parser.add_argument("--rows", type=int, default=HUB_ROWS)
    parser.add_argument("--commands", default="check,plan", help="check, plan or both")
    parser.add_argument("--timeout-s", type=float, default=3600)
    parser.add_argument("--max-rss-gib", type=float, default=14.0)
    parser.add_argument(
        "--cold",
        action="store_true",
        help="Start from an empty datasets cache (the first run builds its Arrow copy of the file).",
    )
    args = parser.parse_args()
    if Path(__file__).resolve().parents[1] in args.scratch.resolve().parents:
        sys.exit("--scratch must lie outside the repository")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from plan_models import header_only_twin

    hub = write_dataset(args.scratch, args.rows)
    manifest = manifest_copy(args.tree, hub, args.scratch, args.rows)
    twin = args.scratch / "twin-qwen2.5-math-1.5b"
    if not (twin / "config.json").is_file():
        header_only_twin(twin, "qwen2.5-math-1.5b")
    cache = args.scratch / "hf-datasets"
    if args.cold and cache.exists():
        import shutil

        shutil.rmtree(cache)
    env = os.environ | {
        "PYTHONPATH": str(args.tree.resolve()), "HF_DATASETS_CACHE": str(cache),
        "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "ARES_ARTIFACTS": str(args.scratch / "artifacts"),
        "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    entry = [sys.executable, "-c", "from ares_cli.main import main; main()"]
    results = {"tree": str(args.tree.resolve()), "rows": args.rows, "unique_prompts": min(UNIQUE, args.rows),
               "datasets_cache": "cold" if args.cold else "as found"}  # fmt: skip
    wanted = args.commands.split(",")
    if "check" in wanted:
        results["data_check"] = run([*entry, "--json", "data", "check", str(manifest)], env,
                                    timeout_s=args.timeout_s, max_rss_gib=args.max_rss_gib)  # fmt: skip
    if "plan" in wanted:
        results["plan_rl"] = run([*entry, "--json", "plan", "rl", "--model", str(twin), "--data",
                                  str(manifest), "--algo", "paec"], env, timeout_s=args.timeout_s,
                                 max_rss_gib=args.max_rss_gib)  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
