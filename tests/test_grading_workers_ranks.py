"""``grading.workers`` counts the run's grading workers, split across its ranks: two CPU ranks (gloo, plain
torch) of an RL run with 3 workers start 2 and 1, not 3 each (PAEC's 16 on 8 ranks: 16 processes, not 128)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import child_processes

REPO = Path(__file__).resolve().parents[1]
SCRIPT = """
import json, os, sys
from pathlib import Path
import ares_cli.grading as grading
from ares_cli.data.loader import load_problems
from ares_cli.training.distributed import leave_process
from ares_cli.training.rl.config import resolve_rl_config
from ares_cli.training.rl.trainer import train_rl



class CountingPool(grading.GradingPool):
    def __init__(self, grader, *, workers, **kwargs):
        Path(sys.argv[2], f"workers.rank{os.environ['RANK']}.json").write_text(json.dumps(workers))
        super().__init__(grader, workers=workers, **kwargs)


if __name__ == "__main__":  # grading workers are spawned: they import this file without running it
    model, out, *sets = sys.argv[1:]
    grading.GradingPool = CountingPool
    train_rl(resolve_rl_config(sets=sets), model_path=model, problems=load_problems("toy-train", limit=4).records,
             val_problems=None, out_dir=out, log=lambda m: None)
    leave_process(0)
"""
SETS = ["algo=grpo", "steps=1", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "optim.mini_batch_size=2", "optim.micro_batch_size=2", "grading.workers=3", "save_every=0",
        "grading.grader=test_rl_graders:parity_grade", "grading.trust_grader_code=true"]  # fmt: skip


def test_the_runs_grading_workers_are_split_across_its_ranks(tiny_model_dir, tmp_path):
    script = tmp_path / "run_rl.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    env = child_processes.two_rank_env(f"{REPO}:{REPO / 'tests'}")
    procs = [child_processes.start([sys.executable, str(script), str(tiny_model_dir), str(out), *SETS], cwd=REPO,
                                   merge_stderr=True, env=env | {"RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(2)]  # fmt: skip
    outputs = [o for o, _ in child_processes.wait_all(procs, timeout=300)]
    assert all(p.returncode == 0 for p in procs), outputs[0][-3000:] + outputs[1][-3000:]
    assert [json.loads((out / f"workers.rank{r}.json").read_text()) for r in range(2)] == [2, 1]


def test_a_share_of_the_workers_per_rank():
    from ares_cli.training.distributed import rank_share

    assert [rank_share(16, r, 8) for r in range(8)] == [2] * 8
    assert [rank_share(3, r, 2) for r in range(2)] == [2, 1]
    assert [rank_share(2, r, 4) for r in range(4)] == [1, 1, 1, 1]  # every rank grades: at least one each
    assert rank_share(16, 0, 1) == 16
