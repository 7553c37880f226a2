"""`ares rl` through the real console entry point: artifact, manifest stats, up to date, --resume."""

from __future__ import annotations

import json

from conftest import run_ares


def test_rl_command_artifact_and_up_to_date(tiny_model_dir, tmp_path):
    args = ("rl", "--model", str(tiny_model_dir), "--data", "toy-train", "--val-data", "toy-val", "--algo", "grpo",
            "--steps", "1", "--set", "data_limit=8", "--set", "val.limit=2", "--set", "rollout.prompts_per_step=2",
            "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=6", "--set", "optim.mini_batch_size=2",
            "--trust-grader-code", "--set", "grading.workers=1", "--set", "grading.grader=tests.test_rl_graders:parity_grade")  # fmt: skip
    first = run_ares(*args, process=False, root=tmp_path)
    path = first.stdout.strip()
    manifest = json.loads(open(f"{path}/manifest.json").read())
    stats = manifest["stats"]
    assert manifest["stage"] == "rl" and stats["steps"] == 1 and stats["val_accuracy_final"] is not None
    assert set(stats["time_s"]) == {"generate", "grade", "forward", "backward"}
    assert "step 1/1 | reward" in first.stderr
    assert {o["path"] for o in manifest["outputs"]} >= {"metrics.jsonl", "model/config.json"}
    again = run_ares(*args, process=False, root=tmp_path)
    assert "up to date" in again.stderr and again.stdout.strip() == path
    other = run_ares(*args[:-2], "--set", "seed=1", "--resume", process=False, root=tmp_path, check=False)
    assert other.returncode == 2 and "no partial run of this configuration to resume" in other.stderr


def test_rl_under_deepspeed_in_one_process_without_a_launcher_keeps_stdout_to_its_result(
    tiny_model_dir, tmp_path
):
    """A recipe's ZeRO-2 config in a plain ``ares rl`` (no torchrun): DeepSpeed forms a group of one instead
    of looking for MPI, and its op-build messages go to stderr, so --json stdout is the result alone."""
    args = ("--json", "rl", "--model", str(tiny_model_dir), "--data", "toy-train", "--algo", "grpo", "--steps", "1",
            "--deepspeed", "pipelines/deepspeed/zero2.json", "--set", "data_limit=4", "--set", "val.every=0",
            "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=4",
            "--set", "optim.mini_batch_size=2", "--set", "grading.workers=1",
            "--set", "grading.grader=tests.test_rl_graders:parity_grade", "--trust-grader-code")  # fmt: skip
    out = run_ares(*args, root=tmp_path)
    result = json.loads(out.stdout)
    assert result["stats"]["deepspeed_zero_stage"] == 2 and result["stats"]["world_size"] == 1


def test_the_deepspeed_launchers_local_rank_flag_is_accepted_and_checked(
    tiny_model_dir, tmp_path, monkeypatch
):
    """The ``deepspeed`` launcher runs ``ares rl --local_rank=N ...`` beside LOCAL_RANK=N: accepted (either
    spelling, ``sft`` too); a value contradicting LOCAL_RANK is a usage error (exit 2) before any work."""
    args = ("rl", "--model", str(tiny_model_dir), "--data", "toy-train", "--algo", "grpo", "--steps", "1",
            "--set", "data_limit=4", "--set", "val.every=0", "--set", "rollout.prompts_per_step=2",
            "--set", "rollout.group_size=2", "--set", "rollout.max_new_tokens=4", "--set", "optim.mini_batch_size=2",
            "--set", "grading.workers=1", "--set", "grading.grader=tests.test_rl_graders:parity_grade",
            "--trust-grader-code")  # fmt: skip
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    ok = run_ares(*args, "--local_rank=0", root=tmp_path, process=False)
    assert ok.returncode == 0 and ok.stdout.strip()
    monkeypatch.setenv("LOCAL_RANK", "0")
    bad = run_ares(*args, "--local_rank=1", root=tmp_path, check=False, process=False)
    assert bad.returncode == 2 and "--local_rank=1 contradicts LOCAL_RANK=0" in bad.stderr
    sft = run_ares("sft", "--model", str(tiny_model_dir), "--data", "toy-train", "--local-rank", "3", root=tmp_path,
                   check=False, process=False)  # fmt: skip
    assert sft.returncode == 2 and "--local_rank=3 contradicts LOCAL_RANK=0" in sft.stderr
