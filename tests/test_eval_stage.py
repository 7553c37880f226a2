"""`ares eval`: scoring existing completions, --json metric names, regrade, difficulty breakdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_ares

from ares_cli.stages.evaluate import EvalConfig, markdown_table, run_eval
from ares_cli.stages.prepare_eval import parse_bench
from ares_cli.store.artifacts import ArtifactStore

PROBLEMS = [
    {"id": "p1", "source": "s", "problem": "half?", "answer": "0.5", "meta": {"difficulty": 1}},
    {"id": "p2", "source": "s", "problem": "two?", "answer": "2", "meta": {"difficulty": 2}},
]
RESPONSES = {  # p1: 0.5 three ways + 3 twice -> maj correct; p2: one correct of four, one invalid
    "p1": ["\\boxed{0.5}", "\\boxed{3}", "\\boxed{\\frac{1}{2}}", "\\boxed{3}", "so \\boxed{1/2}"],
    "p2": ["\\boxed{2}", "\\boxed{5}", "no answer", "\\boxed{5}", "\\boxed{7}"],
}


def _write(tmp_path: Path) -> tuple[Path, Path]:
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    samples = tmp_path / "samples.jsonl"
    rows = [
        {"problem_id": pid, "sample_idx": i, "response": r, "finish_reason": "stop", "n_tokens": 10 * (i + 1)}
        for pid, rs in RESPONSES.items()
        for i, r in enumerate(rs)
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return problems, samples


def test_parse_bench():
    assert parse_bench("math500:16", 8) == ("math500", 16)
    assert parse_bench("toy-test", 8) == ("toy-test", 8)


def test_from_samples_scores_hand_computed(tmp_path):
    problems, samples = _write(tmp_path)
    store = ArtifactStore(tmp_path / "art")
    cfg = EvalConfig(grade_workers=1)
    run, results = run_eval(
        store, model=None, cfg=cfg, data=str(problems), from_samples=str(samples), log=lambda m: None
    )
    overall = results["problems"]["overall"]
    assert overall["k"] == 5
    assert overall["avg@5"] == pytest.approx((3 / 5 + 1 / 5) / 2)
    assert overall["maj@5"] == 0.5  # p1 votes 0.5 (three equivalent forms) over 3; p2 votes 5
    assert overall["pass@1"] == pytest.approx(0.4)
    assert overall["pass@2"] == pytest.approx(((1 - 1 / 10) + (1 - 6 / 10)) / 2)  # 1 - C(n-c,2)/C(5,2)
    assert overall["pass@4"] == pytest.approx((1.0 + (1 - 1 / 5)) / 2)
    assert overall["invalid_rate"] == pytest.approx(1 / 10)
    assert set(results["problems"]["by_difficulty"]) == {"1", "2"}
    rows = [json.loads(x) for x in (run.final_dir / "samples" / "problems.jsonl").read_text().splitlines()]
    assert [r["vote_class"] for r in rows if r["problem_id"] == "p1"] == [0, 1, 0, 1, 0]
    assert "avg@5" in markdown_table("problems", results["problems"])
    again, _ = run_eval(
        store, model=None, cfg=cfg, data=str(problems), from_samples=str(samples), log=lambda m: None
    )
    assert again.up_to_date and again.final_dir == run.final_dir


def test_json_output_and_regrade(tmp_path):
    problems, samples = _write(tmp_path)
    root = tmp_path / "art"
    out = run_ares(
        "--json",
        "eval",
        "--data",
        str(problems),
        "--from-samples",
        str(samples),
        "--set",
        "grade_workers=1",
        process=False,
        root=root,
    )
    result = json.loads(out.stdout)
    for name in ("avg@5", "maj@5", "pass@1", "pass@2", "pass@4", "avg@5_se", "path", "artifact_id"):
        assert name in result, name
    regraded = run_ares(
        "--json",
        "eval",
        "--regrade",
        result["artifact_id"],
        "--grader",
        "boxed_int",
        "--set",
        "grade_workers=1",
        "--set",
        "max_grade_error_rate=0.5",  # p1's five samples are graded 'error': a gold boxed_int cannot read
        process=False,
        root=root,
    )
    again = json.loads(regraded.stdout)
    assert again["artifact_id"] != result["artifact_id"]
    # boxed_int compares integers only: p1's gold 0.5 is never matched; p2 has one exact 2 of five.
    assert again["avg@5"] == pytest.approx((0 + 1 / 5) / 2)
    assert again["error_rate"] == pytest.approx(0.5)
    refused = run_ares("eval", "--regrade", result["artifact_id"], "--grader", "boxed_int", "--set",
                       "grade_workers=1", process=False, root=root, check=False)  # fmt: skip
    assert refused.returncode == 1 and "failed on 5 of 10 samples (50%" in refused.stderr


def _choice_manifest(tmp_path: Path, rows: list[dict], answers: list[list[str]]) -> tuple[Path, Path]:
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = tmp_path / "mc-bench.yaml"
    manifest.write_text(
        "name: mc-bench\ndescription: choice fixture\nlicence: MIT\n"
        f"source: {{local: {{path: {data}}}}}\n"
        "field_map: {problem: q, answer: gold, id_from: qid, options: opts, meta: {seed: seed}}\n"
        "grader: choice\naggregate: {kind: worst_case, group: seed}\n"
    )
    samples = tmp_path / "mc-samples.jsonl"
    samples.write_text(
        "".join(
            json.dumps({"problem_id": r["qid"], "sample_idx": i, "response": a, "n_tokens": 5}) + "\n"
            for r, resp in zip(rows, answers, strict=True)
            for i, a in enumerate(resp)
        )
    )
    return manifest, samples


def test_manifest_grader_and_aggregate_through_eval(tmp_path):
    rows = [
        {"qid": "v1", "q": "Pick 12", "gold": "12", "opts": ["2", "12"], "seed": 1},
        {"qid": "v2", "q": "Pick 2", "gold": "A", "opts": ["2", "12"], "seed": 1},
    ]
    answers = [[r"\boxed{12}", "Answer: B", "(A)"], [r"\boxed{2}", "Answer: A", "A or B"]]
    manifest, samples = _choice_manifest(tmp_path, rows, answers)
    store = ArtifactStore(tmp_path / "art")
    run, results = run_eval(
        store, model=None, cfg=EvalConfig(grade_workers=1), data=str(manifest), from_samples=str(samples),
        log=lambda m: None,
    )  # fmt: skip
    result = results["mc-bench"]
    assert store.manifest(run.final_dir)["config"]["graders"] == {"mc-bench": "choice"}
    assert result["overall"]["avg@3"] == pytest.approx((2 / 3 + 2 / 3) / 2)
    assert result["overall"]["invalid_rate"] == pytest.approx(1 / 6)
    # worst case over the two variants of seed 1: samples 0 and 1 both right, sample 2 not
    assert result["aggregate"]["score"] == pytest.approx(2 / 3) and result["aggregate"]["n_groups"] == 1
    assert "worst_case score" in (run.final_dir / "results.md").read_text()
    # --grader overrides the manifest's: as math, "Answer: B" has no box and is invalid
    _, math = run_eval(
        store, model=None, cfg=EvalConfig(grade_workers=1, grader="math"), data=str(manifest),
        from_samples=str(samples), log=lambda m: None,
    )  # fmt: skip
    assert math["mc-bench"]["overall"]["invalid_rate"] == pytest.approx(4 / 6)


def test_choice_gold_that_names_no_option_is_an_input_error(tmp_path):
    rows = [{"qid": "v1", "q": "Pick", "gold": "7", "opts": ["2", "12"], "seed": 1}]
    manifest, samples = _choice_manifest(tmp_path, rows, [[r"\boxed{A}"]])
    proc = run_ares(
        "eval",
        "--data",
        str(manifest),
        "--from-samples",
        str(samples),
        process=False,
        root=tmp_path,
        check=False,
    )
    assert proc.returncode == 3
    assert "problem v1" in proc.stderr and "neither an option letter" in proc.stderr
