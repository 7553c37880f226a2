"""``ares plan``: each check catches its fault (one broken input per row, named by row or key in the
report), the report's exit codes, and the stages refusing the same inputs before they open an artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from input_rows import write_jsonl as _jsonl
from typer.testing import CliRunner

from ares_cli.main import app

REPO = Path(__file__).resolve().parents[1]
TOY = REPO / "ares_cli" / "toy" / "base"
VL = REPO / "ares_cli" / "toy" / "vl_base"


def _problem(pid: str, **extra) -> dict:
    return {"id": pid, "source": "toy", "problem": "Start at 3, then +4.", "answer": "7", **extra}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> dict[str, Path]:
    """One broken input per check."""
    tmp = tmp_path_factory.mktemp("plan-broken")
    _jsonl(tmp / "q.jsonl", [{"id": "a", "question": "1+1?", "solution": "2"}])
    (tmp / "bad-map.yaml").write_text("name: bad-map\ndescription: a field map naming a missing column\n"
                                      "source:\n  local: {path: q.jsonl}\n"
                                      "field_map: {problem: question, answer: final_answer}\nlicence: test\n")  # fmt: skip
    no_tokenizer = tmp / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((TOY / name).read_bytes())
    (tmp / "bad.png").write_bytes(b"not an image at all")
    (tmp / "zero-typo.json").write_text(json.dumps({"zero_optimization": {"stgae": 2}}))
    (tmp / "zero-broken.json").write_text('{"zero_optimization": {"stage": 2,}')
    return {
        "bad_map": tmp / "bad-map.yaml",
        "bad_gold": _jsonl(
            tmp / "gold.jsonl", [_problem("p1"), _problem("p2", answer="\\frac{"), _problem("p3")]
        ),
        "long": _jsonl(tmp / "long.jsonl", [_problem("p1"), _problem("long-one", problem="7 + " * 400)]),
        "no_tokenizer": no_tokenizer,
        "bad_image": _jsonl(tmp / "img.jsonl", [_problem("p1", images=["bad.png"]), _problem("p2")]),
        "zero_typo": tmp / "zero-typo.json",
        "zero_broken": tmp / "zero-broken.json",
        "toy": TOY,
        "vl": VL,
    }


# (case, args, exit code, failing check, text the report names: the row, key or file)
CASES = [
    ("wrong field map", ["rl", "--model", "{toy}", "--data", "{bad_map}"], 3, "data", "q.jsonl, row 1, field 'answer'"),
    ("unparseable gold answers", ["rl", "--model", "{toy}", "--data", "{bad_gold}", "--algo", "grpo"], 3,
     "gold answers (data)", "row 2, field 'answer'"),
    ("a prompt past the context", ["passrate", "--model", "{toy}", "--data", "{long}", "--max-new-tokens", "400"],
     3, "prompts fit", "problem 'long-one'"),
    ("an indivisible batch", ["rl", "--model", "{toy}", "--data", "toy-train", "--gpus", "3"], 2, "ranks",
     "rollout.prompts_per_step 512"),
    ("a missing tokenizer", ["rl", "--model", "{no_tokenizer}", "--data", "toy-train"], 3, "model",
     "no-tokenizer: model directory has no tokenizer"),
    ("an image that does not decode", ["rl", "--model", "{vl}", "--data", "{bad_image}", "--set", "rollout.max_new_tokens=64"],
     3, "data", "row 1, field 'images'"),  # images are checked from their header when the data loads
    ("a ZeRO config with an unknown key", ["rl", "--model", "{toy}", "--data", "toy-train", "--deepspeed", "{zero_typo}"],
     3, "deepspeed config", "stgae"),
    ("a ZeRO config that does not parse", ["sft", "--model", "{toy}", "--data", "{bad_gold}", "--deepspeed", "{zero_broken}"],
     3, "deepspeed config", "zero-broken.json: DeepSpeed config does not parse"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "args", "code", "check", "named"), CASES, ids=[c[0] for c in CASES])
def test_each_check_catches_its_fault(broken, tmp_path, case, args, code, check, named):
    args = [a.format(**{k: str(v) for k, v in broken.items()}) for a in args]
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "art"), "--json", "plan", *args])
    assert result.exit_code == code, result.output
    report = json.loads(result.stdout)
    assert report["exit_code"] == code
    failed = {c["name"]: c for c in report["checks"] if c["status"] == "fail"}
    assert check in failed, report["checks"]
    text = failed[check]["detail"] + "\n" + "\n".join(failed[check].get("problems", []))
    assert named in text
    assert not (tmp_path / "art").exists() or not any((tmp_path / "art").rglob("*.partial"))


def test_unparseable_gold_lists_only_its_row(broken, tmp_path):
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path), "--json", "plan", "rl", "--model",
                                      str(TOY), "--data", str(broken["bad_gold"]), "--algo", "grpo"])  # fmt: skip
    gold = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "gold answers (data)")
    assert gold["detail"] == "1 of 3 gold answers fail the grader"
    assert len(gold["problems"]) == 1 and "problem 'p2'" in gold["problems"][0]


def test_every_failure_is_reported_together(broken, tmp_path):
    """A broken model and a broken dataset in one run: both checks fail in one report (exit 3)."""
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path), "--json", "plan", "rl", "--model",
                                      str(broken["no_tokenizer"]), "--data", str(broken["bad_map"])])  # fmt: skip
    assert result.exit_code == 3
    failed = {c["name"] for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"}
    assert {"model", "data"} <= failed


def test_config_error_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path), "--json", "plan", "rl", "--model",
                                      str(TOY), "--data", "toy-train", "--set", "optim.mini_batch_size=7"])  # fmt: skip
    assert result.exit_code == 2
    config = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "config")
    assert config["status"] == "fail" and "optim.mini_batch_size 7" in config["detail"]


@pytest.mark.parametrize("stage", ["rl", "sft"])
def test_the_stage_refuses_a_broken_zero_config_before_opening_its_artifact(broken, tmp_path, stage):
    data = "toy-train" if stage == "rl" else str(broken["bad_gold"])
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path), stage, "--model", str(TOY), "--data", data,
                                      "--deepspeed", str(broken["zero_broken"])])  # fmt: skip
    assert result.exit_code == 3
    assert "DeepSpeed config does not parse" in result.output
    assert not (tmp_path / stage).exists()


def test_plan_takes_the_stages_own_options():
    """``plan <stage>`` has every option of ``<stage>`` (same flags, same help), plus the plan options."""
    import typer

    from ares_cli.commands import plan

    def options(path: list[str]) -> dict[str, tuple]:
        command = typer.main.get_command(app)
        for part in path:
            command = command.commands[part]
        return {p.name: (tuple(p.opts), p.help) for p in command.params}

    for name in ("rl", "sft", "passrate", "eval"):
        planned, stage = options(["plan", name]), options([name])
        assert set(planned) == set(stage) | set(plan.PLAN_NAMES)
        assert all(planned[k] == v for k, v in stage.items())


def test_plan_writes_no_artifact(tmp_path):
    result = CliRunner().invoke(app, ["--artifacts-root", str(tmp_path / "art"), "plan", "rl", "--model", str(TOY),
                                      "--data", "toy-train", "--algo", "aepo"])  # fmt: skip
    assert result.exit_code == 0, result.output
    verdict = " ".join(result.stdout.split())  # the table wraps long lines
    assert (
        "fits on paper: every check passed and the estimate fits; not checked: the launch itself" in verdict
    )
    assert "ready" not in verdict
    assert not (tmp_path / "art").exists() or not any(p.is_file() and p.suffix != ".json"
                                                      for p in (tmp_path / "art").rglob("*"))  # fmt: skip
    assert not (tmp_path / "art" / "rl").exists()
