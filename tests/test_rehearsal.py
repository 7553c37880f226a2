"""The rehearsal pipelines: the papers' RL recipes unchanged except their budgets, on twins and stand-ins."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ares_cli.pipeline import load_pipeline, render, stage_config

ROOT = Path(__file__).resolve().parents[1]
REHEARSALS = {"rehearse-paec": "paec-qwen2.5-math-1.5b", "rehearse-ares": "ares-qwen2.5-vl-7b"}
# What a rehearsal may change in a recipe: how much work (steps, batch sizes, G, budgets, validation size,
# grading workers, checkpoint interval) and the generation backend (no vLLM on a CPU); nothing else.
BUDGET_KEYS = {
    "steps", "save_every", "data_limit",
    "rollout.prompts_per_step", "rollout.group_size", "rollout.max_new_tokens", "rollout.max_prompt_tokens",
    "rollout.backend", "rollout.batch_size",
    "optim.mini_batch_size", "optim.micro_batch_size",
    "val.every", "val.k", "val.max_new_tokens", "val.limit",
    "grading.workers",
}  # fmt: skip


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_the_rl_stage_is_the_papers_recipe_with_only_its_budgets_changed(name):
    spec = load_pipeline(ROOT / "pipelines" / f"{name}.yaml")
    stage = spec["stages"]["rl"]
    assert Path(stage["recipe"]) == Path("pipelines/rl") / f"{REHEARSALS[name]}.yaml"
    recipe = _flat(yaml.safe_load((ROOT / stage["recipe"]).read_text())["rl"])
    merged = _flat(stage_config(stage))
    changed = {k for k in merged if merged[k] != recipe.get(k, object())}
    assert changed <= BUDGET_KEYS, changed - BUDGET_KEYS
    assert set(recipe) <= set(merged)  # nothing of the recipe is dropped either
    for key in ("algo", "optim.dtype", "optim.deepspeed", "optim.lr", "loss.clip_high"):
        if key in recipe:
            assert merged[key] == recipe[key]


def test_a_recipe_key_overridden_beyond_budgets_would_be_caught():
    stage = {
        "run": "rl",
        "recipe": "pipelines/rl/paec-qwen2.5-math-1.5b.yaml",
        "config": {"optim": {"lr": 1e-4}},
    }
    recipe = _flat(yaml.safe_load((ROOT / stage["recipe"]).read_text())["rl"])
    merged = _flat(stage_config(stage))
    assert {k for k in merged if merged[k] != recipe.get(k)} - BUDGET_KEYS == {"optim.lr"}


@pytest.mark.parametrize("name", sorted(REHEARSALS))
def test_the_rehearsal_renders_with_the_twin_and_the_stand_ins(name, tmp_path):
    from ares_cli.data.loader import load_problems

    makefile = render(ROOT / "pipelines" / f"{name}.yaml", tmp_path / "state", ares="ares").read_text()
    assert "$(ARES) --json toy twin qwen2.5-" in makefile
    assert '"$$(cat ' in makefile and '/twin.id)"/model' in makefile  # curate tokenises with the twin's files
    config = yaml.safe_load((tmp_path / "state" / "rl.yaml").read_text())
    assert config["optim"]["deepspeed"].startswith("pipelines/deepspeed/zero")
    spec = load_pipeline(ROOT / "pipelines" / f"{name}.yaml")
    for stage in spec["stages"].values():
        for key in ("data", "val_data"):
            value = (stage.get("args") or {}).get(key)
            if value is not None and not str(value).startswith("@"):
                assert load_problems(value).records  # every stand-in resolves by name


def test_the_shipped_stand_ins_are_what_the_generator_writes(tmp_path):
    from PIL import Image

    from ares_cli.rehearsal.stand_in_data import DATA_DIR, write_all

    write_all(tmp_path)
    for path in sorted(DATA_DIR.rglob("*")):
        if path.is_file():
            fresh = tmp_path / path.relative_to(DATA_DIR)
            if path.suffix == ".png":  # pixels, not PNG bytes (encoder versions differ)
                assert Image.open(path).tobytes() == Image.open(fresh).tobytes(), path
            else:
                assert path.read_text() == fresh.read_text(), path


def test_stand_ins_look_like_the_papers_data():
    from ares_cli.data.loader import load_problems
    from ares_cli.grading.registry import resolve_grader

    train = load_problems("rehearse-math-train").records
    assert any("\\frac" in p["problem"] or "\\log" in p["problem"] for p in train)
    assert max(len(p["problem"]) for p in train) > 2000  # long prompts, past PAEC's 512-token limit
    assert all(p.get("images") for p in load_problems("rehearse-vl-train").records)
    choice = load_problems("rehearse-choice-test")
    assert choice.manifest.grader == "choice" and resolve_grader("choice").with_options
    assert all(len(p["meta"]["options"]) == 10 and p["answer"] in "ABCDEFGHIJ" for p in choice.records)


def test_teacher_traces_grade_as_they_were_written():
    import json

    from ares_cli.data.loader import load_problems
    from ares_cli.grading import GradingPool

    gold = {p["id"]: p["answer"] for p in load_problems("rehearse-math-train").records}
    rows = [
        json.loads(line) for line in (ROOT / "ares_cli/rehearsal/data/teacher.jsonl").read_text().splitlines()
    ]
    with GradingPool("math_verify", workers=1, timeout_s=10) as pool:
        grades = pool.grade([(gold[r["problem_id"]], r["response"]) for r in rows])
    assert [g.grade for g in grades] == ["correct", "correct", "incorrect"] * len(gold)


def test_vl_teacher_traces_grade_correct_and_a_wrong_guess_does_not():
    import json

    from ares_cli.data.loader import load_problems
    from ares_cli.grading import GradingPool

    gold = {p["id"]: p["answer"] for p in load_problems("rehearse-vl-train").records}
    rows = [
        json.loads(line)
        for line in (ROOT / "ares_cli/rehearsal/data/vl-teacher.jsonl").read_text().splitlines()
    ]
    other = {"A": "B", "B": "A", "3": "4", "4": "3"}
    wrong = [
        (
            gold[r["problem_id"]],
            r["response"].replace(f"{{{gold[r['problem_id']]}}}", f"{{{other[gold[r['problem_id']]]}}}"),
        )
        for r in rows
        if gold[r["problem_id"]] in other
    ]
    with GradingPool("math_verify", workers=1, timeout_s=10) as pool:
        right = pool.grade([(gold[r["problem_id"]], r["response"]) for r in rows])
        guessed = pool.grade(wrong)
    assert [g.grade for g in right] == ["correct"] * len(rows)
    assert wrong and [g.grade for g in guessed] == ["incorrect"] * len(wrong)


def test_a_figure_blind_guess_is_right_half_the_time_on_the_two_way_vl_problems():
    """AEPO's filter keeps groups with mixed rewards: a cold-started twin that cannot read the figure must
    still be right on some rollouts, so each two-way question's answers are balanced in the training split."""
    from collections import Counter

    from ares_cli.data.loader import load_problems

    records = load_problems("rehearse-vl-train").records
    by_question: dict[str, Counter] = {}
    for r in records:
        by_question.setdefault(r["problem"], Counter())[r["answer"]] += 1
    two_way = {q: c for q, c in by_question.items() if len(c) == 2}
    assert sum(sum(c.values()) for c in two_way.values()) >= len(records) // 2
    for question, counts in two_way.items():
        assert len(set(counts.values())) == 1, (question, counts)  # each answer equally often
