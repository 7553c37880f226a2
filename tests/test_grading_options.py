"""Grading options a benchmark declares (``grading:`` in a manifest): validated plain data, carried in the
grader reference to every grading call, part of the grade label; each answer form and option with its
negative cases beside it, graded through the grading pool (the entry point of rl, eval and passrate)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import run_ares

from ares_cli.data.manifests import load_manifest
from ares_cli.errors import InputErrors, UsageError
from ares_cli.grading import GradingPool, resolve_grader
from ares_cli.grading.declared import benchmark_grader, grader_for
from ares_cli.grading.final_answers import answer_lines, final_answers
from ares_cli.grading.options import GradingOptions, options_from_mapping, split_ref
from ares_cli.grading.registry import is_registered, load_target
from ares_cli.grading.text import bbeh_match

logging.getLogger("math_verify").setLevel(logging.ERROR)
DAPO = "math[answer_forms=answer_line+boxed]"


# -- the options as data ----------------------------------------------------------------------------------


def test_options_are_validated_plain_data():
    opts = options_from_mapping({"answer_forms": ["boxed", "answer_line"], "tolerance": 0.001})
    assert opts == GradingOptions(answer_forms=("answer_line", "boxed"), tolerance=0.001)
    assert (
        opts.suffix() == "[answer_forms=answer_line+boxed,tolerance=0.001]"
    )  # canonical: sorted, defaults out
    assert split_ref("math" + opts.suffix()) == ("math", opts) and split_ref("math") == ("math", None)
    for bad, fragment in [
        ({"answer_forms": ["boxed", "letters"]}, "unknown form 'letters'"),
        ({"answer_forms": []}, "non-empty list"),
        ({"answer_forms": ["boxed", "boxed"]}, "twice"),
        ({"tolerance": 0}, "> 0"),
        ({"tolerance": "0.1"}, "expected a number"),
        ({"tolerance": 5}, "<= 1.0"),
        ({"normalise": "lower"}, "unknown normalisation"),
        ({"any_of": "yes"}, "true or false"),
        ({"module": "os:system"}, "unknown grading option 'module'"),
        ([], "non-empty mapping"),
    ]:
        with pytest.raises(ValueError, match=fragment):
            options_from_mapping(bad)
    for bad in ("math[tolerance=1e-3,tolerance=0.1]", "math[tolerance]", "math[x=y]", "math[tolerance=0.1",
                "math[answer_forms=boxed;rm -rf]"):  # fmt: skip
        with pytest.raises(ValueError):
            split_ref(bad)


def test_a_grader_takes_only_the_options_it_can_apply_and_they_enter_its_label():
    plain, dapo = resolve_grader("math"), resolve_grader(DAPO)
    assert dapo.label == plain.label.replace("math_verify==", "math_verify[answer_forms=answer_line+boxed]==")
    assert dapo.target.endswith("math_grade[answer_forms=answer_line+boxed]") and dapo.extractor.endswith("]")
    assert resolve_grader("math[tolerance=0.001]").label != resolve_grader("math[tolerance=0.01]").label
    for ref, fragment in [
        ("math[normalise=bbeh]", "takes no option 'normalise'"),
        ("choice[tolerance=0.1]", "takes no option 'tolerance'"),
        ("boxed_int[any_of=true]", "takes no option"),
        ("math[tolerance=x]", "expected a number"),
    ]:
        with pytest.raises(UsageError, match=fragment):
            resolve_grader(ref)
    assert is_registered(DAPO) and is_registered("math[tolerance=0.001]+judge")
    assert not is_registered("math[normalise=bbeh]") and not is_registered("os:system[any_of=true]")
    fn = load_target(dapo.target)
    assert fn("34", "34") == "correct" and fn.keywords["options"].answer_forms == ("answer_line", "boxed")
    with pytest.raises(UsageError, match="takes no grading options"):
        load_target("ares_cli.grading.graders:boxed_int_grade[any_of=true]")


def test_a_benchmarks_options_go_with_its_own_grader_only():
    opts = GradingOptions(tolerance=0.001)
    assert benchmark_grader(None, "math", opts) == "math[tolerance=0.001]"
    assert benchmark_grader(None, None, opts) == "math_verify[tolerance=0.001]"
    assert (
        benchmark_grader("math_verify", "math", opts) == "math_verify[tolerance=0.001]"
    )  # alias: same grader
    assert benchmark_grader("math+judge:m", "math", opts) == "math[tolerance=0.001]+judge:m"
    assert benchmark_grader("exact_match", "math", opts) == "exact_match"  # another grader: none of them
    assert benchmark_grader("math[tolerance=0.1]", "math", opts) == "math[tolerance=0.1]"  # explicit wins
    assert benchmark_grader("judge", "math", opts) == "judge"
    assert (
        benchmark_grader("choice", None, None) == "choice"
        and benchmark_grader(None, "choice", None) == "choice"
    )


def _manifest(tmp_path: Path, name: str, extra: str, rows: list[dict]) -> Path:
    data = tmp_path / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "manifests" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"name: {name}\ndescription: d\nlicence: MIT\nsource: {{local: {{path: {data}}}}}\n{extra}"
    )
    return path


def test_a_manifest_declares_grading_options_and_a_bad_one_names_its_field(tmp_path):
    rows = [{"id": "a", "problem": "?", "answer": "34"}]
    ok = _manifest(tmp_path, "dapo", "grader: math\ngrading: {answer_forms: [answer_line, boxed]}\n", rows)
    manifest = load_manifest(ok)
    assert manifest.grading == {"answer_forms": ["answer_line", "boxed"]}
    assert grader_for(None, manifest) == DAPO and grader_for("math", manifest) == DAPO
    for extra, fragment in [
        ("grader: math\ngrading: {normalise: bbeh}\n", "takes no option 'normalise'"),
        ("grading: {tolerance: -1}\n", "tolerance"),
        ("grader: choice\ngrading: {answer_forms: [boxed]}\n", "takes no option 'answer_forms'"),
        ("grader: 'math[tolerance=0.1]'\ngrading: {tolerance: 0.2}\n", "not both"),
        ("grading: {code: 'os:system'}\n", "unknown grading option"),
    ]:
        bad = _manifest(tmp_path, "bad", extra, rows)
        with pytest.raises(InputErrors) as err:
            load_manifest(bad)
        assert f"{bad}, field 'grading'" in str(err.value) and fragment in str(err.value), str(err.value)


def test_the_shipped_manifests_declare_their_scorers_conventions():
    assert grader_for(None, load_manifest("dapo-math-17k")) == DAPO
    assert grader_for(None, load_manifest("dynamath")) == "math[tolerance=0.001]"
    assert (
        grader_for(None, load_manifest("bbeh"))
        == "exact_match[answer_forms=answer_phrase+boxed,normalise=bbeh]"
    )
    assert grader_for(None, load_manifest("logicvista")) == "choice[multi_select=true]"
    assert grader_for(None, load_manifest("mmmu")) == "choice_or_math[any_of=true]"
    assert grader_for(None, load_manifest("mathvista")) == "choice_or_math[round_to_gold=true]"
    assert grader_for(None, load_manifest("mathvision")) == "choice_or_math"
    assert grader_for(None, load_manifest("math500")) == "math"


# -- answer forms through the pool ------------------------------------------------------------------------


def _grades(grader: str, cases: list[tuple[str, str]], meta: dict | None = None) -> list[str]:
    with GradingPool(grader, workers=1, timeout_s=30) as pool:
        golds = [pool.gold_for({"id": "p", "answer": g, "meta": meta or {}}) for g, _ in cases]
        return [r.grade for r in pool.grade(list(zip(golds, [r for _, r in cases], strict=True)))]


def test_the_dapo_answer_line():
    accepted = ["Thus\n\nAnswer: 34", "Answer: $34$", "**Answer:** 34", "**Answer: 34**", r"$\text{Answer: } 7$".replace("7", "34"),
                "Final Answer: 34", r"Answer: \boxed{34}", "So \\boxed{34}.\nAnswer: 34", "Answer: 34\nAnswer: 34"]  # fmt: skip
    refused = [
        "Answer: 34\n\nWait, I made an error: the sum is 35.",  # the Answer line is not the final answer
        "Answer: 35\n...\nAnswer: 34",  # two Answer lines that disagree
        "Answer: 34 or 35",  # a hedge
        "Answer: probably 34, maybe 35",
        "So \\boxed{35}.\nAnswer: 34",  # a box and an Answer line that disagree
        "The answer is 34.",  # no declared form
        "Answer:",
    ]
    grades = _grades(DAPO, [("34", r) for r in accepted + refused])
    assert grades[: len(accepted)] == ["correct"] * len(accepted), grades
    assert "correct" not in grades[len(accepted) :], grades
    assert _grades("math", [("34", "Thus\n\nAnswer: 34")]) == [
        "invalid"
    ]  # only where the benchmark declares it
    assert answer_lines("Answer: 34\nmore") == [] and answer_lines("x\nAnswer: 3\nAnswer: 4") == ["3", "4"]
    assert final_answers(r"\boxed{3} or \boxed{4}") == ["3", "4"] and final_answers(
        r"\boxed{4} \boxed{4}"
    ) == ["4"]


def test_bbeh_fuzzy_match():
    assert bbeh_match("404.0", "404") and bbeh_match("a,b", "a, b") and bbeh_match("[valid]", "valid")
    assert bbeh_match("(a)", "a") and bbeh_match("'x'", "x") and bbeh_match("**Yes**", "yes")
    assert not bbeh_match("405", "404") and not bbeh_match("b, a", "a, b") and not bbeh_match("(b)", "a")
    grader = "exact_match[answer_forms=answer_phrase+boxed,normalise=bbeh]"
    cases = [("404", "So the final answer is 404.0."), ("404", "The final answer is 405."),
             ("(a)", "The answer is: a"), ("no", "The final answer is yes."), ("no", "It is no."),
             ("no", "The final answer is no. \\boxed{yes}")]  # fmt: skip
    assert _grades(grader, cases) == ["correct", "incorrect", "correct", "incorrect", "invalid", "incorrect"]


def test_multi_select_golds():
    grader = "choice[multi_select=true]"
    cases = [("A, C", r"\boxed{A, C}"), ("A, C", r"\boxed{C and A}"), ("A, C", "Answer: A, C"),
             ("A, C", r"\boxed{A}"), ("A, C", r"\boxed{A, B, C}"), ("A, C", r"\boxed{A or C}"), ("B", r"\boxed{B}")]  # fmt: skip
    assert _grades(grader, cases) == [
        "correct",
        "correct",
        "correct",
        "incorrect",
        "incorrect",
        "invalid",
        "correct",
    ]
    with pytest.raises(UsageError):
        resolve_grader("math[multi_select=true]")


def test_choice_or_math_per_row():
    options = {"options": ["135°", "140°", "145°", "150°"]}
    cases = [("145°", r"\boxed{C}"), ("145°", r"\boxed{B}"), ("145°", r"\boxed{145^\circ}"), ("145°", r"\boxed{140}"),
             ("145°", r"\boxed{146^\circ}"), ("C", r"\boxed{C}")]  # fmt: skip
    assert _grades("choice_or_math", cases, options) == [
        "correct",
        "incorrect",
        "correct",
        "incorrect",
        "incorrect",
        "correct",
    ]
    assert _grades("choice_or_math", [("7", r"\boxed{7}"), ("7", r"\boxed{C}"), ("7", r"\boxed{3} \boxed{7}")]) == [
        "correct", "incorrect", "incorrect"
    ]  # fmt: skip


def test_choice_golds_are_checked_per_row(tmp_path):
    from ares_cli.data.gold_check import check_choice_golds

    rows = [{"id": "a", "answer": "145°", "meta": {"options": ["145°", "150°"]}}, {"id": "b", "answer": "7"}]
    check_choice_golds(
        rows, "choice_or_math", "data.jsonl"
    )  # the free-form row is math: not checked as a choice
    with pytest.raises(InputErrors, match="problem b"):
        check_choice_golds(rows, "choice", "data.jsonl")
    with pytest.raises(InputErrors, match="problem m"):
        check_choice_golds(
            [{"id": "m", "answer": "A, C", "meta": {"options": ["1", "2", "3"]}}], "choice", "d.jsonl"
        )
    check_choice_golds(
        [{"id": "m", "answer": "A, C", "meta": {"options": ["1", "2", "3"]}}],
        "choice[multi_select=true]",
        "d",
    )


# -- end to end: the manifest's options reach the grading call, and change the artifact ------------------


def test_eval_grades_a_benchmark_by_its_declared_answer_forms(tmp_path, monkeypatch):
    rows = [{"id": "a", "problem": "Find 30 + 4.", "answer": "34"}]
    _manifest(tmp_path, "dapo-like", "grader: math\ngrading: {answer_forms: [answer_line, boxed]}\n", rows)
    responses = ["Thus\n\nAnswer: 34", "Answer: 34\n\nNo wait, it is 35.", "Answer: 35\nAnswer: 34"]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(
        json.dumps({"problem_id": "a", "sample_idx": i, "response": r, "finish_reason": "stop", "n_tokens": 5}) + "\n"
        for i, r in enumerate(responses)
    ))  # fmt: skip
    monkeypatch.setenv("ARES_MANIFESTS", str(tmp_path / "manifests"))
    args = [
        "--json",
        "eval",
        "--data",
        "dapo-like",
        "--from-samples",
        str(samples),
        "--set",
        "grade_workers=1",
    ]
    out = run_ares(*args, process=False, root=tmp_path / "art")
    plain = run_ares(*args, "--grader", "math[answer_forms=boxed]", process=False, root=tmp_path / "art")
    directory, other = Path(json.loads(out.stdout)["path"]), Path(json.loads(plain.stdout)["path"])
    assert directory != other  # the options key the artifact
    (path,) = (directory / "samples").glob("*.jsonl")
    graded = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["grade"] for r in graded] == ["correct", "invalid", "incorrect"]
    assert graded[0]["grader"].startswith("math_verify[answer_forms=answer_line+boxed]==")
    config = json.loads((directory / "manifest.json").read_text())["config"]
    assert config["graders"] == {"dapo-like": DAPO}
    (path,) = (other / "samples").glob("*.jsonl")
    assert [json.loads(line)["grade"] for line in path.read_text().splitlines()] == ["invalid"] * 3


def test_rl_grades_its_training_data_by_the_data_manifests_options(tmp_path, monkeypatch):
    from ares_cli.stages.checklist import Checklist
    from ares_cli.stages.prepare_rl import prepare_rl
    from ares_cli.store.artifacts import ArtifactStore
    from ares_cli.training.rl.config import key_config
    from ares_cli.training.rl.step_metrics import gold_of

    rows = [{"id": "a", "problem": "Find 30 + 4.", "answer": "34"}]
    _manifest(tmp_path, "dapo-like", "grader: math\ngrading: {answer_forms: [answer_line, boxed]}\n", rows)
    monkeypatch.setenv("ARES_MANIFESTS", str(tmp_path / "manifests"))

    def prepared(data, sets=()):
        return prepare_rl(ArtifactStore(tmp_path / "art"), model=str(tmp_path / "no-model"), data=data,
                          val_data=None, yaml_path=None, sets=list(sets), flags={}, world_size=1, on_gpu=False,
                          checks=Checklist(collect=True), hash_inputs=False).cfg  # fmt: skip

    cfg = prepared("dapo-like")
    assert cfg.grading.grader == "math_verify[answer_forms=answer_line+boxed]"
    assert key_config(cfg)["grading"]["grader"] == cfg.grading.grader  # the options key the artifact
    assert prepared("dapo-like", ["grading.grader=exact_match"]).grading.grader == "exact_match"
    assert prepared(str(tmp_path / "dapo-like.jsonl")).grading.grader == "math_verify"  # a plain file
    with GradingPool(cfg.grading.grader, workers=1, timeout_s=30) as pool:
        (result,) = pool.grade([(gold_of(pool, rows[0]), "Thus\n\nAnswer: 34")])
    assert result.grade == "correct"
