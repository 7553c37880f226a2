"""The store and the training state under hostile or careless use, through the CLI.

A read-only artifacts root still verifies and answers "up to date" (the verification record it cannot
save is a warning); checkpoint metadata is checked against its hash before it is trusted (a tampered
``world_size`` cannot make resume walk 50 million ranks); a damaged metric log is an error naming its row;
``--resume`` with nothing to resume says what is missing without creating a directory.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ares_cli.main import app


def _invoke(root: Path, *argv: str):
    result = CliRunner().invoke(app, ["--artifacts-root", str(root), *argv])
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        result.exception
    )
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture()
def eval_store(tmp_path) -> tuple[Path, list[str]]:
    """A store holding one eval artifact graded from fixed samples (no model); the argv that made it."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(
        json.dumps({"id": f"p{i}", "source": "toy", "problem": "?", "answer": str(i)}) + "\n" for i in (1, 2)
    ))  # fmt: skip
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(
        json.dumps({"problem_id": f"p{i}", "sample_idx": 0, "response": "\\boxed{1}"}) + "\n" for i in (1, 2)
    ))  # fmt: skip
    argv = ["eval", "--data", str(problems), "--from-samples", str(samples), "--grader", "boxed_int",
            "--set", "grade_workers=1"]  # fmt: skip
    root = tmp_path / "artifacts"
    code, text = _invoke(root, *argv)
    assert code == 0, text
    return root, argv


def _read_only(monkeypatch, root: Path) -> None:
    """Every write, replace and unlink under ``root`` fails as on a read-only mount (EROFS), as the
    kernel does: unlink fails even for a file that does not exist."""
    real = {name: getattr(Path, name) for name in ("write_text", "write_bytes", "unlink", "mkdir", "touch")}
    real_replace, real_open = os.replace, open

    def inside(path) -> bool:
        return Path(root).absolute() in Path(path).absolute().parents

    def refuse(path):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    for name, fn in real.items():
        monkeypatch.setattr(
            Path, name, lambda self, *a, _fn=fn, **kw: refuse(self) if inside(self) else _fn(self, *a, **kw)
        )
    monkeypatch.setattr(os, "replace", lambda a, b: refuse(b) if inside(b) else real_replace(a, b))
    monkeypatch.setattr(
        "builtins.open",
        lambda file, mode="r", *a, **kw: (
            refuse(file)
            if isinstance(file, (str, Path)) and inside(file) and any(m in mode for m in "wax+")
            else real_open(file, mode, *a, **kw)
        ),
    )


def test_a_read_only_store_still_verifies_and_is_up_to_date(eval_store, monkeypatch):
    root, argv = eval_store
    (root / ".verified.json").unlink()  # the record must be written again: that write fails
    _read_only(monkeypatch, root)
    code, text = _invoke(root, "artifacts", "verify")
    assert code == 0, text
    assert ": ok (" in text and "warning: cannot save the verification record" in text
    code, text = _invoke(root, *argv)
    assert code == 0, text
    assert "up to date" in text


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"inputs": 5}, "corrupt manifest ('inputs' is not a list)"),
        ({"inputs": [{"role": "a"}]}, "corrupt manifest (inputs[0] lacks a role, a path or a sha256)"),
        ({"config": "x"}, "corrupt manifest ('config' is not an object)"),
        ({"stats": [1]}, "corrupt manifest ('stats' is not an object)"),
    ],
    ids=["inputs-not-a-list", "input-without-hash", "config-not-an-object", "stats-not-an-object"],
)
@pytest.mark.parametrize(
    "verb", [["artifacts", "lineage"], ["artifacts", "show"], ["eval", "--regrade"], ["report", "compare"]]
)
def test_a_manifest_of_the_wrong_shape_is_corrupt(eval_store, change, fragment, verb):
    """A stored manifest is read as data: a field of the wrong shape is exit 4 naming it (lineage and
    regrade iterated them and crashed)."""
    root, _ = eval_store
    manifest_file = next((root / "eval").glob("eval-*/manifest.json"))
    manifest_file.write_text(json.dumps(json.loads(manifest_file.read_text()) | change))
    ref = f"a={manifest_file.parent}" if verb[0] == "report" else str(manifest_file.parent)
    code, text = _invoke(root, *verb, ref)
    assert code == 4, text
    assert f"{manifest_file}: {fragment}" in text


# -- checkpoints and the metric log of a partial RL run --------------------------------------------------

RL = ["rl", "--algo", "grpo", "--data", "toy-train", "--steps", "2", "--trust-grader-code",
      "--set", "data_limit=8", "--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=2",
      "--set", "rollout.max_new_tokens=6", "--set", "optim.mini_batch_size=2", "--set", "grading.workers=1",
      "--set", "grading.grader=test_rl_graders:parity_grade", "--set", "val.every=0", "--set", "save_every=1"]  # fmt: skip


def _reseal(step_dir: Path, meta_change: dict) -> None:
    """Edit ``state.json`` and recompute its entry in rank 0's file list, as a careful tamperer would."""
    from ares_cli.store.hashing import sha256_file

    state = step_dir / "state.json"
    state.write_text(json.dumps(json.loads(state.read_text()) | meta_change))
    listing = step_dir / "files.rank0.json"
    entries = json.loads(listing.read_text())
    entries["state.json"] = {"sha256": sha256_file(state), "bytes": state.stat().st_size}
    listing.write_text(json.dumps(entries))


@pytest.fixture()
def partial_rl_run(tiny_model_dir, tmp_path) -> tuple[Path, list[str], Path]:
    """An RL run stopped after its first step: (root, its argv, its partial directory)."""
    root = tmp_path / "artifacts"
    argv = [*RL, "--model", str(tiny_model_dir)]
    code, text = _invoke(root, *argv, "--set", "max_steps_this_run=1")
    assert code == 1 and "stopped after step 1" in text, text
    return root, argv, next((root / "rl").glob("rl-*.partial"))


def test_a_partial_rl_run_trusts_neither_its_checkpoint_metadata_nor_its_metric_log(partial_rl_run):
    root, argv, partial = partial_rl_run
    step = partial / "checkpoints" / "step-000001"

    metrics = partial / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + json.dumps({"reward": 1.0}) + "\n")
    code, text = _invoke(root, *argv)
    assert code == 3, text
    assert f"{metrics}, row 2, field 'step'" in text and "needs an integer 'step', got None" in text

    metrics.write_text(good)
    _reseal(step, {"world_size": 50_000_000})
    code, text = _invoke(root, *argv)  # bounded by the rank lists on disk: refused at once, fresh start
    assert code == 0, text
    assert "step-000001 is damaged (state.json names world_size 50000000, but 1 rank file list(s)" in text


def test_resume_without_a_partial_run_creates_nothing_and_says_so(tiny_model_dir, tmp_path):
    root = tmp_path / "artifacts"
    code, text = _invoke(root, *RL, "--model", str(tiny_model_dir), "--resume")
    assert code == 2, text
    assert "--resume: there is no partial run of this configuration to resume" in text
    assert "holds no checkpoint" not in text
    assert not list((root / "rl").glob("*")) if (root / "rl").exists() else True


def test_a_forged_verification_record_is_documented_where_the_record_is_described():
    """The record trusts a stat it has seen; what it cannot see is said in the docs that describe it."""
    from ares_cli.store import integrity

    text = " ".join(integrity.__doc__.split())
    assert "A forged or edited record is trusted" in text and "ares artifacts verify" in text
    readme = " ".join((Path(__file__).resolve().parents[1] / "docs" / "usage.md").read_text().split())
    assert "A forged or edited `.verified.json` is trusted" in readme
