"""`ares curate` over files: teacher responses graded and tokenised when the fields are missing."""

from __future__ import annotations

import json

import pytest
from conftest import run_ares


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_curate_files_grades_tokenises_and_targets_lengths(tmp_path, tiny_model_dir):
    problems = [{"id": f"p{i}", "source": "s", "problem": f"q{i}", "answer": str(i)} for i in range(4)]
    rates = [{"problem_id": "p0", "source": "s", "n_correct": 0, "k": 2},
             {"problem_id": "p1", "source": "s", "n_correct": 1, "k": 2},
             {"problem_id": "p2", "source": "s", "n_correct": 2, "k": 2},
             {"problem_id": "p3", "source": "s", "n_correct": 2, "k": 2}]  # fmt: skip
    long, short = "x" * 40, "y" * 4
    responses = [  # no 'correct' (graded by boxed_int) and no 'n_tokens' (character tokenizer)
        {"problem_id": "p0", "response": long + " \\boxed{0}"},
        {"problem_id": "p0", "response": short + " \\boxed{0}"},
        {"problem_id": "p1", "response": long + " \\boxed{1}"},
        {"problem_id": "p1", "response": short + " \\boxed{1}"},
        {"problem_id": "p1", "response": "z \\boxed{7}"},
        {"problem_id": "p2", "response": short + " \\boxed{2}"},
        {"problem_id": "p2", "response": long + " \\boxed{2}"},
        {"problem_id": "p3", "response": short + " \\boxed{3}"},
    ]
    args = ["--json", "curate", "--passrates", _jsonl(tmp_path / "r.jsonl", rates),
            "--responses", _jsonl(tmp_path / "c.jsonl", responses), "--data", _jsonl(tmp_path / "p.jsonl", problems),
            "--tokenizer", str(tiny_model_dir), "--grader", "boxed_int", "--per-bracket", "1"]  # fmt: skip
    result = json.loads(run_ares(*args, process=False, root=tmp_path / "art").stdout)
    stats = result["stats"]
    # lengths: long = 40 + len(" \boxed{d}") = 50 tokens, short = 14 (one token per character)
    # lengths: long = 40 + len(" \\boxed{d}") = 50 tokens, short = 14 (one token per character)
    # L(0) = median over p0's candidates (50, 14) = 32; L(1) = median over p2, p3 (14, 50, 14) = 14
    assert stats["sources"]["s"]["L0"] == pytest.approx(32.0)
    assert stats["sources"]["s"]["L1"] == pytest.approx(14.0)
    assert stats["filled"] == {"tokenised": 8, "graded": 8}
    rows = [json.loads(x) for x in open(f"{result['path']}/sft.jsonl")]
    chosen = {r["bracket"]: r for r in rows}
    assert set(chosen) == {"0/2", "1/2", "2/2"}
    assert chosen["0/2"]["response"].startswith(
        "y"
    )  # target 32: |50-32| = |14-32|, the tie goes to the shorter
    assert chosen["1/2"]["target_len"] == pytest.approx(23.0)  # (1 - 1/2) * 32 + 1/2 * 14
    assert chosen["1/2"]["response"].startswith("y")  # 14 is nearer 23 than 50; the wrong "z" is never chosen
    assert chosen["2/2"]["n_tokens"] == 14
    again = run_ares(*args, process=False, root=tmp_path / "art")
    assert json.loads(again.stdout)["up_to_date"] is True
