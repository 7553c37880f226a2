"""The math grader's rules, one class at a time, with hand-written forms.

Each false accept the rules close is tested with the hack it closes; each acceptance path has its
negative beside it (a false accept is a reward hack). ``math_grade`` runs in process here (the pool runs
the same function in its workers)."""

from __future__ import annotations

import logging

import pytest

from ares_cli.grading.answer_forms import control_characters, read_items, repair_escapes
from ares_cli.grading.math_grader import UNDECIDED, math_grade, math_triage_grade, verdict

logging.getLogger("math_verify").setLevel(logging.ERROR)


def accepts(gold: str, answer: str) -> bool:
    return math_grade(gold, answer) == "correct"


def check(gold: str, accepted: list[str], refused: list[str]) -> None:
    for answer in accepted:
        assert accepts(gold, answer), f"{gold!r} should accept {answer!r}"
    for answer in refused:
        assert not accepts(gold, answer), f"{gold!r} should refuse {answer!r}"


# -- false accepts closed -----------------------------------------------------------------------------


def test_implicit_products_are_never_dropped():
    # math-verify strips a trailing "unit" word: 4bc -> 4, 2 a c -> 2 a
    check("x^{2} - 3yz", ["x^2-3yz", "-3zy + x^{2}", "x^{2} - 3 y z"], ["x^{2} - 3", "x^2 - 3y"])
    check("b^{2} - 2ac", ["b^{2} -2 a c", "b^2-2ca"], ["b^{2} - 2", "b^2 - 2a"])
    check(r"\frac{3}{4}k", [r"\dfrac{3}{4} k", "0.75k"], [r"\frac{3}{4}", "0.75"])
    check("12", [r"12 \text{ cm}", "12 cm"], ["12 km^2 + 1"])  # a unit after a number still goes


def test_a_number_before_a_group_is_a_product():
    # latex2sympy adds: 3\binom{10}{4} is 3 + 210 there, 2(3) is 5
    check(
        r"3\binom{10}{4}",
        ["630", r"3 \cdot \binom{10}{4}", r"3\dbinom{10}{4}"],
        [r"3 + \binom{10}{4}", "213"],
    )
    check("6", ["2(3)", r"2\left(3\right)", "(2)(3)"], ["5"])
    check("5", [], ["2(3)"])
    check(r"2\frac{1}{2}", [r"\frac{5}{2}", "2.5"], ["1"])  # a mixed number stays a mixed number


def test_a_list_is_never_a_single_value():
    check("4", ["4", r"\{4\}"], ["4, 4", "4, 5", r"4 \text{ and } 4"])
    check("4, 4", ["4,4", r"4 \text{ and } 4"], ["4", "4, 4, 4"])
    check("1, -2", ["-2, 1", r"\{1, -2\}", r"1 \text{ and } -2"], ["1", "1, 2", "1, -2, 1"])


def test_exact_expressions_are_compared_exactly():
    # both exact: a difference of 1e-200 is a difference
    check(
        r"\frac{5-5^{-300}}{6}",
        [r"\frac{5}{6} - \frac{1}{6 \cdot 5^{300}}"],
        [r"\frac{5}{6} + \frac{1}{6 \cdot 5^{300}}", r"\frac{5}{6}"],
    )
    check(r"\frac{3^{500}}{3^{500}+7}", [r"\frac{3^{500}}{7+3^{500}}"], [r"\frac{3^{500}}{3^{500}+14}", "1"])
    check(
        r"\frac{\sqrt{6}}{3}",
        [r"\sqrt{\frac{2}{3}}", r"\frac{2}{\sqrt{6}}"],
        [r"\frac{\sqrt{6}}{3} + 10^{-40}"],
    )
    check(r"2^{4012}", ["4^{2006}"], ["4^{2006} - 1", "2^{4011}"])


def test_a_decimal_matches_an_exact_gold_only_when_it_is_exact():
    check(r"\frac{3}{8}", ["0.375", "0.3750"], ["0.37", "0.376"])
    check(r"\frac{2}{7}", [r"\frac{4}{14}"], ["0.285714", "0.2857142857", "0.29"])
    check(r"\sqrt{2}", [r"\frac{2}{\sqrt{2}}"], ["1.414214", "1.41421356237"])
    check(r"1 - \frac{1}{e}", [r"\frac{e-1}{e}"], ["0.632121", "0.63212055882856"])
    check(r"\left(\frac{2}{7}, 1\right)", [r"\left(\frac{4}{14}, 1\right)"], ["(0.285714, 1)"])
    check("2.5", [r"\frac{5}{2}", "2.50"], ["2.49", "2.51"])  # a decimal gold is the exact number it writes


# -- false rejects fixed, each with its negative ----------------------------------------------------------


def test_clock_times_are_times_not_ratios():
    check(
        r"\text{7:15 a.m.}",
        [r"7:15 \text{ a.m.}", "7:15 AM", r"\text{7:15am}"],
        [r"7:15 \text{ p.m.}", "7:16 a.m.", r"\frac{7}{15}", "7:15"],
    )
    check(r"\text{7:15 p.m.}", ["19:15", r"7:15\,\text{pm}"], ["7:15 a.m.", "17:15"])
    assert verdict(r"\text{7:15 p.m.}", "7:15") == UNDECIDED  # a.m. or p.m.: the rules cannot say


def test_pm_shorthand_expands_into_both_items():
    check("(1, 3), (1, -3)", [r"(1, \pm 3)", r"(1, -3), (1, 3)"], [r"(1, \pm 4)", "(1, 3)", r"(\pm 1, 3)"])
    check(
        r"2 + \sqrt{5}, 2 - \sqrt{5}",
        [r"2 \pm \sqrt{5}", r"2 \mp \sqrt{5}"],
        [r"2 \pm \sqrt{6}", r"2 + \sqrt{5}"],
    )
    check(r"2 \pm \sqrt{5}", [r"2-\sqrt{5}, 2+\sqrt{5}"], [r"2+\sqrt{5}"])
    check("3", [], [r"\pm 3"])
    # two signs in one item: the pairing is not written down; left to the judge
    assert verdict("(1,2), (1,-2), (-1,2), (-1,-2)", r"(\pm 1, \pm 2)") == UNDECIDED


def test_an_ordering_chain_is_the_ordered_list():
    check(
        r"\sqrt{3}, 2, \pi",
        [r"\sqrt{3} < 2 < \pi", r"\sqrt{3} \le 2 \le \pi"],
        [r"2 < \sqrt{3} < \pi", r"\pi > 2 > \sqrt{3}"],
    )
    check(r"\sqrt{3}", [], [r"\sqrt{3} < 2 < \pi"])
    check("(1, 3)", [], ["1 < x < 3"])  # a range for a variable is not an ordering of numbers


def test_lists_joined_with_and():
    check(
        "(1, 2), (3, 4)",
        [r"(1, 2) \text{ and } (3, 4)", r"(3,\ 4),\ \text{and}\ (1,\ 2)", "(3,4), (1,2)"],
        [r"(1, 2) \text{ and } (3, 5)", "(1, 2)"],
    )
    check("f(x) = 0, f(x) = x^2", [r"f(x) = x^2 \quad \text{and} \quad f(x) = 0"], [r"f(x) = 0"])


def test_percent_against_a_plain_number():
    check("45", [r"45.0\%", r"45\%", "45"], ["0.45", r"45.5\%", r"4.5\%"])
    check(r"45\%", ["45", "0.45", r"45\%"], ["0.045", "46"])
    check("5", [], ["0.05"])  # the percent reading of a plain number is not taken


def test_a_renamed_function_argument():
    check(
        "f(x) = 3x - 1", ["f(t) = 3t - 1", "f(x)=3x-1"], ["f(t) = 3t + 1", "g(t) = 3t - 1", "f(t) = 3x - 1"]
    )
    # renamed constants are for the judge: the rules cannot know which names are given
    assert verdict("f(x) = ax + b", "f(x) = cx + d") == UNDECIDED


def test_a_gold_written_as_an_equation():
    check(r"3 \cdot \binom{6}{2} = 45", ["45", r"3\binom{6}{2}", r"3 \cdot 15"], ["44", "15"])
    check(r"(\sqrt{3}+1)^2 = 4 + 2\sqrt{3}", [r"4 + 2\sqrt{3}", r"2(2+\sqrt{3})"], [r"4 + 3\sqrt{3}"])
    check(
        r"\binom{n+2}{2} = \binom{n+2}{n}", [r"\binom{2+n}{2}", r"\frac{(n+1)(n+2)}{2}"], [r"\binom{n+2}{3}"]
    )
    # not an identity: its sides are not answers
    check("x^2 + y^2 = 4", ["x^2+y^2=4"], ["4", "x^2 + y^2"])
    check("x = 5", ["5", "x=5"], ["x"])


def test_inequalities_for_an_interval():
    check(
        r"x < -2 \text{ or } x > 3",
        [r"(-\infty, -2) \cup (3, \infty)"],
        [r"(-\infty, -2] \cup (3, \infty)", "(-2, 3)"],
    )
    check(r"t > 5, t < -1", [r"(-\infty, -1) \cup (5, \infty)"], [r"(-1, 5)"])
    check(r"x \ge 1, x \le 4", ["[1, 4]"], ["(1, 4)"])
    check("(1, 3)", [], ["x > 1, x < 3"])  # a point (1, 3) is not the range 1 < x < 3


def test_comma_lists_of_three_digit_numbers():
    check(
        "120,245,360,481,502",
        ["481,120,245,502,360", r"\{502, 481, 360, 245, 120\}"],
        ["481,120,245,502", "481,120,245,502,361"],
    )
    check("70,110", [r"\{70^\circ, 110^\circ\}", "70, 110", "70110"], ["110, 70", "70"])
    check("1,234", ["1234", r"1{,}234"], ["234,1", "234, 1", "1, 2, 3, 4"])
    check(r"10{,}080", ["10080", r"10,\!080"], ["10, 80", "1008"])


def test_log_without_base_against_ln():
    check(r"\log 7 - 1", [r"\ln 7 - 1", r"\log 7 - 1"], [r"\ln 8 - 1", r"\ln 7"])
    check(r"\log_{10} 7", [r"\log_{10}(7)"], [r"\ln 7"])


def test_named_tuples_are_read_in_the_gold_order_of_names():
    check("(p, q) = (3, 5)", ["(q, p) = (5, 3)", "(3, 5)", "(p, q) = (3, 5)"], ["(q, p) = (3, 5)", "(5, 3)"])


def test_tuples_written_without_separators():
    check("(1,2)(3,4)", ["(3,4), (1,2)", r"\{(1, 2), (3, 4)\}"], ["(1,2), (3,5)", "(1,2)"])
    check("(x+1)(x+2)", ["x^2+3x+2", "(x+2)(x+1)"], ["(x+1), (x+2)", "x^2+3x+1"])
    check("(0, 0)； (3, 4)", ["(3,4), (0,0)"], ["(0, 0)"])


def test_text_answers_differing_only_in_spacing_and_wrappers():
    check(
        r"\text{Player A wins}",
        ["\\text{Player\u202fA wins.}", r"\text{player a wins}"],
        [r"\text{Player B wins}"],
    )
    check("9 red marbles", [r"9\text{ red marbles}"], ["8", r"9 \text{ blue marbles}"])
    assert verdict("9 red marbles", "9") == UNDECIDED  # prose around a number: for the judge


def test_corrupted_golds_are_read_as_the_command_they_were():
    assert repair_escapes("\x0crac{5}{6}") == r"\frac{5}{6}"
    assert repair_escapes("7:15 \text{ a.m.}") == r"7:15 \text{ a.m.}"
    assert repair_escapes("\x08inom{5}{2}") == r"\binom{5}{2}"
    assert control_characters("\x0crac{1}{2}\t\n") == [r"\t", r"\x0c"]
    check("\x0crac{5}{6}", [r"\dfrac{5}{6}"], [r"\frac{6}{5}"])
    check("\x08inom{5}{2}", ["10"], ["7"])


def test_or_in_a_gold_is_an_alternative_only_for_the_same_value():
    check(r"65537 \text{ or } 2^{16}+1", ["65537", "2^{16}+1"], ["65536"])
    check(r"x = 1 \text{ or } x = 2", ["1, 2", "x = 2, x = 1"], ["1", "2"])


def test_equivalent_statements_in_a_gold():
    check(r"x^2 \ge 4 \Leftrightarrow |x| \ge 2", [r"|x| \ge 2", r"x^{2} \geq 4"], [r"x \ge 2", r"|x| \ge 4"])


def test_a_prose_gold_with_its_answer_in_display_math():
    gold = r"The functions are \[ f(x) = 0 \quad \text{or} \quad f(x) = x^{2} \]"
    check(gold, [r"f(x) = 0 \text{ or } f(x) = x^2"], ["f(x) = 0", r"f(x) = x^2 \text{ or } f(x) = x"])


def test_what_the_rules_leave_to_the_judge():
    undecided = [
        (r"\text{Yes}", r"\text{Yes, the set can always be extended.}"),
        (r"\text{irrational}", r"\text{not a rational number}"),
        ("f(x) = ax + b", "f(x) = cx + d"),
        (r"\prod_{i=1}^{n} b_i", r"b_1 b_2 \cdots b_n"),
        (r"\frac{m}{q}", r"g(m) \le \frac{m}{q}"),
        (
            r"3 \text{ if } n \text{ is odd, and } 0 \text{ otherwise}",
            r"\begin{cases} 3 & n \text{ odd} \\ 0 & n \text{ even} \end{cases}",
        ),
    ]
    for gold, answer in undecided:
        assert verdict(gold, answer) == UNDECIDED, (gold, answer)
        assert math_triage_grade(gold, answer) == "invalid"
        assert math_grade(gold, answer) == "incorrect"
    # a definite difference is never handed over: the judge must not be the one to accept "4, 4" for 4
    for gold, answer in [("4", "4, 4"), ("a^2 - 4bc", "a^2 - 4"), (r"\frac{2}{7}", "0.285714"), ("12", "13")]:
        assert math_triage_grade(gold, answer) == "incorrect", (gold, answer)


def test_unreadable_gold_is_an_error_for_the_plain_grader():
    with pytest.raises(ValueError, match="could not be parsed"):
        math_grade("}{", "3")


def test_read_items_forms():
    assert read_items(r"(0,\ 0),\ \text{and}\ (1,\ 2)").items == ("(0, 0)", "(1, 2)")
    assert read_items(r"\left\{1,\ 2\right\}").items == ("1", "2")
    assert read_items("a < b < c").chain == ("a", "b", "c")
    assert read_items("(x, y) = (1, 2)").names == ("x", "y")
    assert read_items(r"(\pm 1, \pm 2)").unread
