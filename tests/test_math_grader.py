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


# -- false accepts of the last rules closed, each with the correct form beside it ------------------------


def test_a_row_break_followed_by_a_space_stays_a_row_break():
    spaced, tight = r"\begin{pmatrix} 1 \\ 2 \\ 3 \end{pmatrix}", r"\begin{pmatrix}1\\2\\3\end{pmatrix}"
    check(
        spaced,
        [tight, spaced],
        [r"\begin{pmatrix} 3 \\ 2 \\ 1 \end{pmatrix}", "6", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"],
    )
    check(tight, [spaced], [r"\begin{pmatrix} 2 \\ 2 \\ 2 \end{pmatrix}"])
    assert (
        verdict(spaced, r"\begin{pmatrix} 3 \\ 2 \\ 1 \end{pmatrix}") == "incorrect"
    )  # a matrix is no prose


def test_several_final_answers_are_wrong_unless_the_gold_is_their_set():
    check(
        "4",
        [r"\boxed{4} \boxed{4}", r"\boxed{x = 4} \boxed{4}"],
        [r"\boxed{3} \boxed{4}", r"\boxed{4} \boxed{3}"],
    )
    check("2, 3", [r"\boxed{2} \boxed{3}", r"\boxed{3} \boxed{2}", r"\boxed{2} \boxed{3} \boxed{2, 3}"],
          [r"\boxed{2} \boxed{5}", r"\boxed{2} \boxed{3} \boxed{4}", r"\boxed{2}"])  # fmt: skip
    check("(1, 2), (3, 4)", [r"\boxed{(1, 2)} \boxed{(3, 4)}"], [r"\boxed{(1, 2)} \boxed{(4, 3)}"])
    assert verdict(r"\text{Yes}", r"\boxed{\text{Yes}} \boxed{\text{Yes, always}}") == UNDECIDED


def test_a_percentage_against_a_plain_gold_by_the_size_of_the_gold():
    check("25", [r"25\%", "25"], [r"2500\%", r"0.25\%", "0.25"])
    check("0.25", [r"25\%", r"\frac{1}{4}"], [r"0.25\%", r"2.5\%"])
    check("3", [], [r"300\%", r"3\%" + "0"])
    check(r"40\%", ["40", "0.4", r"40\%"], [r"4000\%", "4"])


def test_a_bound_with_no_left_side_is_not_its_number():
    check("5", ["5"], [r"\geq 5", r"\ge 5", "> 5", r"\leq 5"])
    check(r"[5, \infty)", [r"\geq 5", r"x \geq 5"], ["> 5", r"\leq 5"])
    check(r"(-\infty, 2)", ["< 2", "x < 2"], [r"\le 2", "> 2"])


def test_a_chain_of_equalities_states_every_value():
    check("5", [r"x = 2 + 3 = 5", "2 + 3 = 5", "x = 5"], ["x = 5 = 6", "4 = 5", "x = 6 = 5"])
    check("6", [], ["x = 5 = 6"])
    check("10", ["a + b = 10", "a + b = 7 + 3 = 10"], ["a + b = 7 + 3 = 11", "a + b = 11 = 10"])


def test_thousands_with_a_thin_or_plain_space():
    check("1000", [r"1\,000", "1 000", "1~000", r"1\;000"], [r"1\,001", "100"])
    check("0", ["0"], [r"1\,000", "1 000"])
    check("1234567", [r"1\,234\,567", "1 234 567"], [r"1\,234\,568"])
    check("600", [r"2 \cdot 300"], ["2 300"])  # a group of three after a space is a thousands group


def test_repeating_decimals_are_the_fractions_they_write():
    check(r"\frac{1}{3}", [r"0.\overline{3}", r"0.3\overline{3}"], ["0.333", r"0.\overline{33}3"])
    check(r"\frac{1}{6}", [r"0.1\overline{6}"], [r"0.\overline{16}", "0.1666"])
    check(r"\frac{4}{33}", [r"0.\overline{12}"], [r"0.\overline{21}"])


def test_an_option_label_names_a_letter_and_a_value():
    check("D", [r"\text{(D) } 24", "(D)", r"\textbf{(D)} 24"], [r"\text{(C) } 24", "(C)"])
    check("24", [r"\text{(D) } 24", "(B) 24"], [r"\text{(D) } 25", "(D)"])
    check(r"\text{(E)}", ["E", "(E)"], ["A", r"\text{(A)}"])


def test_a_set_named_in_words():
    check(r"(-\infty, \infty)", [r"\text{all real numbers}", r"\text{All real numbers.}"],
          [r"\text{all positive real numbers}", r"\text{all real numbers except } 0", r"\text{no real numbers}"])  # fmt: skip
    check(r"(0, \infty)", [], [r"\text{all real numbers}"])


def test_an_answer_label_in_front_of_the_answer():
    check("7", [r"\text{Answer: } 7", r"\text{Answer: 7}", r"\text{Final answer: } 7"],
          [r"\text{Answer: } 8", r"\text{Answer: } 7 \text{ or } 8"])  # fmt: skip


def test_one_inequality_against_the_interval_it_describes():
    check(r"[2, \infty)", [r"x \geq 2", r"x \ge 2"], ["x > 2", r"x \le 2"])
    check(r"x \le -1", [r"(-\infty, -1]"], [r"(-\infty, -1)", r"[-1, \infty)"])
    check(r"[-3, 3]", [r"-3 \le x \le 3"], [r"-3 < x \le 3", r"-3 \le x < 3"])


def test_grading_options_in_the_rules():
    from ares_cli.grading.options import GradingOptions

    tolerance, rounding = GradingOptions(tolerance=0.001), GradingOptions(round_to_gold=True)
    for answer, want in [("2.094", True), (r"\frac{2\pi}{3}", True), ("2.0934", True), ("2.096", False),
                         ("2.1", False), ("2.094, 2.094", False), (r"2.094\%", False)]:  # fmt: skip
        assert (math_grade("2.0944", answer, tolerance) == "correct") is want, answer
    assert math_grade("2.0944", "2.094") == "incorrect"  # only with the benchmark's tolerance
    assert math_grade("12", "12.0005", tolerance) == "incorrect"  # an integer gold stays exact
    for answer, want in [("1.449", True), ("1.4549", True), ("1.455", False), ("1.4", False), ("1.45", True)]:
        assert (math_grade("1.45", answer, rounding) == "correct") is want, answer
    any_of = GradingOptions(any_of=True)
    gold = "['24/7', '3.429']"
    assert [math_grade(gold, a, any_of) for a in (r"\frac{24}{7}", "3.429", "3.43")] == [
        "correct",
        "correct",
        "incorrect",
    ]
    assert math_grade("[1, 2]", "1", any_of) == "incorrect"  # an interval stays one gold
