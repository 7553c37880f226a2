"""AdaCS curation (ARES section 3.1, table 4 CS-Vanilla): hand-computed targets, choice, sampling, fallbacks."""

from __future__ import annotations

import pytest

from ares_cli.algorithms.curation import (
    Candidate,
    CurationConfig,
    choose_nearest,
    curate,
    length_anchors,
    length_vs_passrate_points,
    parse_candidates,
    parse_pass_rates,
    target_length,
)
from ares_cli.errors import InputError, UsageError


def pr(pid, n, k=4, source="A"):
    return {"problem_id": pid, "source": source, "k": k, "n_correct": n, "pass_rate": n / k}


def cand(pid, idx, n_tokens, correct=True):
    return {
        "problem_id": pid,
        "sample_idx": idx,
        "response": f"{pid}#{idx}",
        "n_tokens": n_tokens,
        "correct": correct,
    }


def prompts_for(records):
    return {r["problem_id"]: f"Q {r['problem_id']}" for r in records}


# Source A, k=4. L(0) = median(100, 200, 300) = 200 (all candidates, none correct);
# L(1) = median(10, 20, 30, 40) = 25 (even count: mean of the middle two).
# L_target(1/4) = 0.75*200 + 0.25*25 = 156.25; (2/4) = 112.5; (3/4) = 50 + 18.75 = 68.75.
BASE_PR = [pr("a0", 0), pr("a1", 1), pr("a2", 2), pr("a3", 3), pr("a4", 4)]
BASE_CANDS = [
    cand("a0", 0, 100, False), cand("a0", 1, 200, False), cand("a0", 2, 300, False),
    cand("a1", 0, 150, True), cand("a1", 1, 160, True), cand("a1", 2, 157, False),
    cand("a2", 0, 100, True), cand("a2", 1, 130, True), cand("a2", 2, 112, False), cand("a2", 3, 50, True),
    cand("a3", 0, 70, False), cand("a3", 1, 60, True), cand("a3", 2, 80, True),
    cand("a4", 0, 10, True), cand("a4", 1, 20, True), cand("a4", 2, 30, True), cand("a4", 3, 40, True),
]  # fmt: skip


def test_target_length_equation():
    assert target_length(0.0, 200, 25) == 200
    assert target_length(1.0, 200, 25) == 25
    assert target_length(0.25, 200, 25) == pytest.approx(156.25)
    assert target_length(0.375, 800, 0) == pytest.approx(500.0)


def test_anchors_are_medians_of_all_candidates():
    anchors = length_anchors(parse_pass_rates(BASE_PR), parse_candidates(BASE_CANDS), CurationConfig())
    assert anchors["A"]["L0"] == 200.0 and anchors["A"]["L0_rule"] == "observed"
    assert anchors["A"]["L1"] == 25.0 and anchors["A"]["L1_rule"] == "observed"
    assert anchors["A"]["n_pass0"] == 1 and anchors["A"]["n_pass1"] == 1


def test_length_mode_targets_and_nearest_correct_choice():
    examples, stats = curate(BASE_PR, BASE_CANDS, prompts_for(BASE_PR), CurationConfig(per_bracket=1))
    got = {e["problem_id"]: e for e in examples}
    assert set(got) == {"a1", "a2", "a3", "a4"}  # a0 has no correct candidate
    assert (
        got["a1"]["target_len"] == pytest.approx(156.25) and got["a1"]["n_tokens"] == 160
    )  # |3.75| < |6.25|
    # a2: target 112.5; the incorrect 112 is ignored, 100 (|12.5|) beats 130 (|17.5|)
    assert got["a2"]["target_len"] == pytest.approx(112.5) and got["a2"]["response"] == "a2#0"
    assert got["a3"]["target_len"] == pytest.approx(68.75) and got["a3"]["n_tokens"] == 60  # 70 is incorrect
    assert (
        got["a4"]["target_len"] == pytest.approx(25.0) and got["a4"]["n_tokens"] == 20
    )  # tie 20/30 -> shorter
    assert got["a2"] == {
        "problem_id": "a2", "source": "A", "prompt": "Q a2", "response": "a2#0", "n_tokens": 100,
        "pass_rate": 0.5, "target_len": 112.5, "bracket": "2/4",
    }  # fmt: skip
    assert [e["bracket"] for e in examples] == ["1/4", "2/4", "3/4", "4/4"]
    b0 = stats["brackets"]["0/4"]
    assert (b0["problems"], b0["eligible"], b0["no_correct"], b0["chosen"], b0["shortfall"]) == (
        1,
        0,
        1,
        0,
        1,
    )
    assert stats["skipped_no_correct"] == 1 and stats["total_shortfall"] == 1 and stats["total_chosen"] == 4
    assert stats["brackets"]["2/4"]["target_len_mean"] == pytest.approx(112.5)
    assert stats["brackets"]["2/4"]["chosen_len_mean"] == 100


def test_tie_rule_smaller_delta_then_shorter_then_lower_index():
    cands = [
        Candidate("p", 0, "x", 110, True),
        Candidate("p", 2, "y", 90, True),
        Candidate("p", 1, "z", 90, True),
    ]
    assert choose_nearest(cands, 100.0).sample_idx == 1
    assert choose_nearest(cands + [Candidate("p", 3, "w", 101, True)], 100.0).sample_idx == 3
    assert choose_nearest([Candidate("p", 0, "x", 100, False)], 100.0) is None


def test_problem_without_correct_candidate_is_skipped_and_counted():
    records = BASE_PR + [pr("a2b", 2), pr("a2c", 2)]
    cands = BASE_CANDS + [cand("a2b", 0, 100, False)]  # a2c has no candidate at all
    examples, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=3))
    assert {e["problem_id"] for e in examples if e["bracket"] == "2/4"} == {"a2"}
    b2 = stats["brackets"]["2/4"]
    assert (b2["problems"], b2["eligible"], b2["no_correct"], b2["chosen"], b2["shortfall"]) == (
        3,
        1,
        2,
        1,
        2,
    )
    assert stats["skipped_no_correct"] == 3  # a0, a2b, a2c


def _grid(per=5, k=4, source="A"):
    """``per`` problems in every bracket 1..k of k; each has correct candidates of lengths 10*(n+1) and 999."""
    records, cands = [], []
    for n in range(1, k + 1):
        for j in range(per):
            pid = f"{source}{n}_{j}"
            records.append(pr(pid, n, k, source))
            cands += [cand(pid, 0, 999, True), cand(pid, 1, 10 * (n + 1), True)]
    records.append(pr(f"{source}0_0", 0, k, source))
    cands += [cand(f"{source}0_0", 0, 500, False)]
    return records, cands


def counts(examples):
    out = {}
    for e in examples:
        out[e["bracket"]] = out.get(e["bracket"], 0) + 1
    return out


def test_bracket_uniformity_per_bracket_size_and_balanced():
    records, cands = _grid(per=5)
    records += [pr("extra", 1)]
    cands += [cand("extra", 0, 20, True)]
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=3))
    assert counts(ex) == {"1/4": 3, "2/4": 3, "3/4": 3, "4/4": 3} and stats["quota_rule"] == "per_bracket"
    assert stats["brackets"]["0/4"]["shortfall"] == 3
    # size=7 over 5 brackets: 1 each, remainder 2 to the lowest pass rates (0/4 and 1/4)
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(size=7))
    assert [stats["brackets"][b]["quota"] for b in ("0/4", "1/4", "2/4", "3/4", "4/4")] == [2, 2, 1, 1, 1]
    assert counts(ex) == {"1/4": 2, "2/4": 1, "3/4": 1, "4/4": 1} and stats["total_shortfall"] == 2
    # balanced default: min eligible over non-empty brackets (5), bracket 1/4 has 6
    ex, stats = curate(records, cands, prompts_for(records))
    assert counts(ex) == {"1/4": 5, "2/4": 5, "3/4": 5, "4/4": 5} and stats["quota_rule"] == "balanced"


def test_teacher_responses_fill_bracket_zero():
    records, cands = _grid(per=2)
    cands += [cand("A0_0", 1, 480, True), cand("A0_0", 2, 900, True)]  # e.g. teacher (--responses)
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=1))
    zero = [e for e in ex if e["bracket"] == "0/4"]
    # L(0) = median(500, 480, 900) = 500 -> target 500, nearest correct 480
    assert len(zero) == 1 and zero[0]["target_len"] == 500 and zero[0]["n_tokens"] == 480
    assert stats["brackets"]["0/4"]["shortfall"] == 0


def test_seeded_determinism_and_modes_draw_same_problems():
    records, cands = _grid(per=10)
    cfg = CurationConfig(per_bracket=4, seed=7)
    first = curate(records, cands, prompts_for(records), cfg)
    assert curate(list(reversed(records)), list(reversed(cands)), prompts_for(records), cfg) == first
    others = {
        tuple(
            e["problem_id"]
            for e in curate(records, cands, prompts_for(records), CurationConfig(per_bracket=4, seed=s))[0]
        )
        for s in range(5)
    }
    assert len(others) > 1
    uni, _ = curate(
        records, cands, prompts_for(records), CurationConfig(mode="uniform", per_bracket=4, seed=7)
    )
    assert [e["problem_id"] for e in uni] == [e["problem_id"] for e in first[0]]


def test_uniform_mode_ignores_length_but_keeps_correct_only():
    records, cands = _grid(per=10)
    cands += [cand("A2_0", 2, 30, False)]  # an incorrect candidate exactly at a plausible length
    seen = set()
    for seed in range(20):
        ex, stats = curate(
            records, cands, prompts_for(records), CurationConfig(mode="uniform", per_bracket=10, seed=seed)
        )
        assert stats["mode"] == "uniform"
        seen |= {e["n_tokens"] for e in ex}
        assert all(e["response"] != "A2_0#2" for e in ex)
    assert 999 in seen and {20, 30, 40, 50} <= seen  # both lengths picked, whatever the target
    length_ex, _ = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=10))
    assert 999 not in {e["n_tokens"] for e in length_ex}


def test_l0_fallbacks_nearest_bracket_global_and_unavailable():
    records, cands = _grid(per=2, source="B")
    records = [r for r in records if r["n_correct"] > 0]  # source B: no pass-rate-0 problem
    # lowest bracket 1/4 of B: candidates 999, 20 (x2 problems) -> median(20, 20, 999, 999) = 509.5
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=1))
    assert stats["sources"]["B"]["L0"] == 509.5 and stats["sources"]["B"]["L0_rule"] == "nearest_bracket:1/4"
    # global: pass-rate-0 lengths pooled from source A (100, 200, 300) -> 200
    allr, allc = records + BASE_PR, cands + BASE_CANDS
    _, stats = curate(allr, allc, prompts_for(allr), CurationConfig(per_bracket=1, l0_fallback=("global",)))
    assert stats["sources"]["B"]["L0"] == 200.0 and stats["sources"]["B"]["L0_rule"] == "global"
    assert stats["sources"]["A"]["L0_rule"] == "observed"
    # no rule applies: length mode refuses, uniform mode reports target_len None
    with pytest.raises(InputError, match="anchor"):
        curate(records, cands, prompts_for(records), CurationConfig(per_bracket=1, l0_fallback=()))
    ex, stats = curate(
        records, cands, prompts_for(records), CurationConfig(mode="uniform", per_bracket=1, l0_fallback=())
    )
    assert stats["sources"]["B"]["L0"] is None and stats["sources"]["B"]["L0_rule"] == "unavailable"
    assert len(ex) == 4 and all(e["target_len"] is None for e in ex if e["pass_rate"] < 1)
    # a pass-rate-1 problem's target is L(1) alone (L(0) has weight 0 there)
    assert all(e["target_len"] == stats["sources"]["B"]["L1"] for e in ex if e["pass_rate"] == 1)


def test_l1_fallbacks_symmetric():
    records = [r for r in BASE_PR if r["n_correct"] < 4]
    cands = [c for c in BASE_CANDS if c["problem_id"] != "a4"]
    # highest bracket with p > 0 is 3/4: median(70, 60, 80) = 70; targets use L1 = 70
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=1))
    assert stats["sources"]["A"]["L1"] == 70.0 and stats["sources"]["A"]["L1_rule"] == "nearest_bracket:3/4"
    assert {e["bracket"]: e["target_len"] for e in ex}["2/4"] == pytest.approx(0.5 * 200 + 0.5 * 70)
    other = [pr("z4", 4, source="Z")]
    allr, allc = records + other, cands + [cand("z4", 0, 12, True), cand("z4", 1, 14, True)]
    _, stats = curate(
        allr,
        allc,
        prompts_for(allr),
        CurationConfig(per_bracket=1, l1_fallback=("global", "nearest_bracket")),
    )
    assert stats["sources"]["A"]["L1"] == 13.0 and stats["sources"]["A"]["L1_rule"] == "global"


def test_inputs_grade_field_pass_rate_only_and_errors():
    records = [
        {"problem_id": "p", "source": "S", "k": 2, "pass_rate": 0.5},
        {"problem_id": "q", "k": 2, "n_correct": 2},
    ]
    samples = [
        {"problem_id": "p", "sample_idx": 0, "response": "r0", "n_tokens": 5, "grade": "correct"},
        {"problem_id": "p", "sample_idx": 1, "response": "r1", "n_tokens": 9, "grade": "timeout"},
        {"problem_id": "q", "response": "q0", "n_tokens": 3, "grade": "correct"},
        {"problem_id": "ghost", "response": "g", "n_tokens": 3, "grade": "correct"},
    ]
    # uniform mode: source "default" (q) has only a pass-rate-1 problem, so it has no L(0) anchor
    ex, stats = curate(records, samples, {"p": "P", "q": "Q"}, CurationConfig(mode="uniform", per_bracket=1))
    assert [(e["problem_id"], e["source"], e["bracket"]) for e in ex] == [
        ("p", "S", "1/2"),
        ("q", "default", "2/2"),
    ]
    assert stats["unknown_candidates"] == 1
    with pytest.raises(InputError, match="prompt"):
        curate(records, samples, {"p": "P"}, CurationConfig(mode="uniform", per_bracket=1))
    with pytest.raises(InputError, match="duplicate"):
        parse_pass_rates([pr("x", 1), pr("x", 2)])
    with pytest.raises(InputError, match="pass_rate"):
        parse_pass_rates([{"problem_id": "x", "k": 4, "n_correct": 1, "pass_rate": 0.5}])
    with pytest.raises(InputError, match="correct"):
        parse_candidates([{"problem_id": "x", "n_tokens": 3}])
    with pytest.raises(UsageError):
        CurationConfig(per_bracket=1, size=2)
    with pytest.raises(UsageError):
        CurationConfig(l0_fallback=("median_of_everything",))
    assert CurationConfig(l1_fallback=["global"]).l1_fallback == ("global",)


def test_plot_points_and_png(tmp_path):
    examples, _ = curate(BASE_PR, BASE_CANDS, prompts_for(BASE_PR), CurationConfig(per_bracket=1))
    points = length_vs_passrate_points(examples)
    assert [(p["pass_rate"], p["n_tokens"]) for p in points] == [
        (0.25, 160),
        (0.5, 100),
        (0.75, 60),
        (1.0, 20),
    ]
    assert points[0]["target_len"] == pytest.approx(156.25)
    pytest.importorskip("matplotlib")
    from ares_cli.report.plot_curate import plot_length_vs_passrate

    out = tmp_path / "len.png"
    plot_length_vs_passrate(points, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_model_that_solves_nothing_needs_no_l1_anchor():
    """All pass rates 0 (a base model, or a random twin, with teacher responses): L(1) has weight 0 in
    L_target(0) = 1*L(0) + 0*L(1), so its absence is no error; L(0) = median(40, 60, 70, 200) = 65."""
    records = [pr("z0", 0), pr("z1", 0)]
    cands = [cand("z0", 0, 40), cand("z0", 1, 60), cand("z1", 0, 200, False), cand("z1", 1, 70)]
    ex, stats = curate(records, cands, prompts_for(records), CurationConfig(per_bracket=2))
    assert stats["sources"]["A"]["L1"] is None
    assert {e["problem_id"]: (e["target_len"], e["n_tokens"]) for e in ex} == {"z0": (65, 60), "z1": (65, 70)}
    # a partly solved problem brings L(1) back into its target: with no anchor rule it is still an error
    with pytest.raises(InputError, match="anchor"):
        curate([pr("z0", 0), pr("z1", 2)], cands, prompts_for(records),
               CurationConfig(per_bracket=2, l1_fallback=()))  # fmt: skip
