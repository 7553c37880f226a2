"""Small local stand-ins of the papers' datasets, for the rehearsals on shape twins (``pipelines/rehearse-*``).

Real-looking records in the Problem schema, generated from seeded templates with exact answers:

- ``math-train`` (DAPO-Math-17k's role): LaTeX problems (polynomials, fractions, divisors, logarithms,
  congruences) with integer or fraction answers, and long prompts (a data table of 40-70 rows before the
  question, 900-1,500 tokens) that a 512-token prompt limit (PAEC) must drop;
- ``math-val`` (AIME 2023's role, PAEC's validation set) and ``math-test`` (the MATH-500 / AMC / AIME roles);
- ``vl-train`` and ``vl-test`` (ARES's multimodal data): bar charts and right triangles drawn as PNGs, the
  numbers needed to answer only in the image (counts and two-way choices, sums and areas);
- ``choice-test`` (MMLU-Pro / GPQA): ten-option multiple-choice records (``meta.options``, a letter answer);
- ``teacher.jsonl`` / ``vl-teacher.jsonl``: per training problem, worked solutions of different lengths
  (one with a slip), the candidate responses AdaCS curates from, as ARES curates a teacher's traces.

The files ship in ``ares_cli/rehearsal/data/`` (a few hundred KB); :func:`write_all` regenerates them.
"""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"
SOURCE = "rehearsal"


def _frac(value: Fraction) -> str:
    return (
        str(value.numerator)
        if value.denominator == 1
        else f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    )


def _poly(rng: random.Random) -> tuple[str, str, list[str]]:
    a, b, c, k = rng.randint(2, 9), rng.randint(-12, 12), rng.randint(-20, 20), rng.randint(-5, 6)
    value = a * k * k + b * k + c
    problem = f"Let $f(x) = {a}x^2 {'+' if b >= 0 else '-'} {abs(b)}x {'+' if c >= 0 else '-'} {abs(c)}$. Compute $f({k})$."
    steps = [f"Substitute $x = {k}$: $f({k}) = {a}\\cdot({k})^2 + ({b})\\cdot({k}) + ({c})$.",
             f"Here $({k})^2 = {k * k}$, so the first term is ${a * k * k}$ and the second is ${b * k}$.",
             f"Adding, ${a * k * k} + ({b * k}) + ({c}) = {value}$."]  # fmt: skip
    return problem, str(value), steps


def _fractions(rng: random.Random) -> tuple[str, str, list[str]]:
    p, q, r, s = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    total = Fraction(p, q) + Fraction(r, s)
    problem = (f"Compute $\\dfrac{{{p}}}{{{q}}} + \\dfrac{{{r}}}{{{s}}}$. Express your answer as a common "
               "fraction in lowest terms.")  # fmt: skip
    lcm = q * s // math.gcd(q, s)
    steps = [f"The least common denominator of ${q}$ and ${s}$ is ${lcm}$.",
             f"So the sum is $\\dfrac{{{p * lcm // q} + {r * lcm // s}}}{{{lcm}}} = \\dfrac{{{p * lcm // q + r * lcm // s}}}{{{lcm}}}$.",
             f"In lowest terms this is ${_frac(total)}$."]  # fmt: skip
    return problem, _frac(total), steps


def _divisors(rng: random.Random) -> tuple[str, str, list[str]]:
    n = rng.choice([12, 18, 20, 24, 28, 30, 36, 40, 42, 45, 48, 60, 72, 84, 90, 96])
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    problem = f"What is the sum of all positive divisors of ${n}$?"
    steps = [f"The positive divisors of ${n}$ are ${', '.join(map(str, divisors))}$.",
             f"Their sum is ${' + '.join(map(str, divisors))} = {sum(divisors)}$."]  # fmt: skip
    return problem, str(sum(divisors)), steps


def _logs(rng: random.Random) -> tuple[str, str, list[str]]:
    b, k = rng.choice([2, 3, 5]), rng.randint(2, 5)
    problem = f"If $\\log_{{{b}}} x = {k}$, what is the value of $x$?"
    steps = [f"By definition, $\\log_{{{b}}} x = {k}$ means $x = {b}^{{{k}}}$.", f"So $x = {b**k}$."]
    return problem, str(b**k), steps


def _congruence(rng: random.Random) -> tuple[str, str, list[str]]:
    m, r, n = rng.randint(3, 9), 0, rng.randint(40, 200)
    r = rng.randint(0, m - 1)
    count = len([x for x in range(1, n + 1) if x % m == r])
    problem = f"How many integers $n$ with $1 \\le n \\le {n}$ satisfy $n \\equiv {r} \\pmod{{{m}}}$?"
    first = r if r > 0 else m
    steps = [f"These are $n = {first}, {first + m}, {first + 2 * m}, \\ldots$, an arithmetic progression with difference ${m}$.",
             f"The largest one at most ${n}$ is ${first + (count - 1) * m}$, so there are $\\frac{{{first + (count - 1) * m} - {first}}}{{{m}}} + 1 = {count}$ of them."]  # fmt: skip
    return problem, str(count), steps


def _long_table(rng: random.Random) -> tuple[str, str, list[str]]:
    rows = rng.randint(70, 110)
    values = [rng.randint(10, 99) for _ in range(rows)]
    lines = [f"| {i + 1} | station {chr(65 + i % 26)}{i // 26} | {v} |" for i, v in enumerate(values)]
    pick = sorted(rng.sample(range(rows), 3))
    problem = (
        "A survey team recorded the number of birds counted at each observation station during one morning. "
        "The stations are listed in the order they were visited; the count is the number of distinct birds "
        "seen in a ten-minute window.\n\n| row | station | count |\n|---|---|---|\n" + "\n".join(lines) +
        f"\n\nWhat is the total count of rows {pick[0] + 1}, {pick[1] + 1} and {pick[2] + 1}?"
    )  # fmt: skip
    total = sum(values[i] for i in pick)
    steps = [f"Row {i + 1} has count ${values[i]}$." for i in pick] + [
        f"The total is ${' + '.join(str(values[i]) for i in pick)} = {total}$."
    ]
    return problem, str(total), steps


KINDS = {"polynomial": _poly, "fractions": _fractions, "divisors": _divisors, "logarithm": _logs,
         "congruence": _congruence, "long-table": _long_table}  # fmt: skip


def _solution(steps: list[str], answer: str, *, verbose: bool) -> str:
    body = "\n".join(steps)
    if verbose:
        body = ("Let me work through this carefully, one step at a time.\n" + body +
                "\nWait, let me double-check each step before answering. Re-doing the arithmetic gives the "
                "same result, so the computation is consistent.")  # fmt: skip
    return f"{body}\nTherefore, the final answer is $\\boxed{{{answer}}}$."


def _math_items(name: str, n: int, seed: int, long_every: int) -> list[tuple[dict, list[str]]]:
    rng = random.Random(f"{name}-{seed}")
    kinds = [k for k in KINDS if k != "long-table"]
    items = []
    for i in range(n):
        kind = "long-table" if long_every and i % long_every == long_every - 1 else kinds[i % len(kinds)]
        problem, answer, steps = KINDS[kind](rng)
        record = {"id": f"rehearse-{name}-{i:03d}", "source": SOURCE, "problem": problem, "answer": answer,
                  "meta": {"difficulty": kind}}  # fmt: skip
        items.append((record, steps))
    return items


def math_split(name: str, n: int, seed: int, *, long_every: int = 0) -> list[dict]:
    """``n`` LaTeX problems; every ``long_every``-th one a long table prompt."""
    return [record for record, _ in _math_items(name, n, seed, long_every)]


def teacher_responses(name: str, n: int, seed: int, *, long_every: int = 0) -> list[dict]:
    """Three candidate solutions per problem of :func:`math_split`: concise, verbose, and one with a slip."""
    rows = []
    for record, steps in _math_items(name, n, seed, long_every):
        pid, answer = record["id"], record["answer"]
        wrong = f"{answer}1" if not answer.startswith("\\") else "0"
        rows += [{"problem_id": pid, "sample_idx": 0, "response": _solution(steps, answer, verbose=False)},
                 {"problem_id": pid, "sample_idx": 1, "response": _solution(steps, answer, verbose=True)},
                 {"problem_id": pid, "sample_idx": 2, "response": _solution(steps[:-1], wrong, verbose=False)}]  # fmt: skip
    return rows


# One short reading shared by every image problem: a few cold-start steps teach a random twin this format,
# and what is left for it to learn is the answer.
VL_READING = "I read the labels in the figure."


def vl_teacher_responses(records: list[dict]) -> list[dict]:
    """Two candidate solutions per image problem: the figure read, then the boxed answer (a short and a long)."""
    rows = []
    for record in records:
        boxed = f"The answer is $\\boxed{{{record['answer']}}}$."
        rows += [{"problem_id": record["id"], "sample_idx": 0, "response": f"{VL_READING}\n{boxed}"},
                 {"problem_id": record["id"], "sample_idx": 1,
                  "response": f"{VL_READING} I check each label again.\n{boxed}"}]  # fmt: skip
    return rows


def _bar_chart(rng: random.Random, path: Path, bars: int) -> list[int]:
    from PIL import Image, ImageDraw

    heights = [rng.randint(1, 9) for _ in range(bars)]
    img = Image.new("RGB", (224, 168), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.line([(16, 150), (216, 150)], fill=(0, 0, 0), width=2)
    width = 180 // len(heights)
    for j, h in enumerate(heights):
        x0 = 24 + j * width
        draw.rectangle([x0, 150 - h * 14, x0 + width - 10, 150], fill=(70 + 40 * j, 110, 200 - 30 * j))
        draw.text((x0 + 4, 150 - h * 14 - 12), str(h), fill=(0, 0, 0))
    img.save(path)
    return heights


def _triangle(rng: random.Random, path: Path, vertical_longer: bool | None = None) -> tuple[int, int]:
    """A right triangle with its vertical leg ``a`` and horizontal leg ``b`` labelled (``a != b``)."""
    from PIL import Image, ImageDraw

    a, b = rng.sample(range(2, 13), 2)
    if vertical_longer is not None and (a > b) != vertical_longer:
        a, b = b, a
    img = Image.new("RGB", (224, 168), (250, 250, 240))
    draw = ImageDraw.Draw(img)
    draw.polygon([(30, 140), (30 + 14 * b, 140), (30, 140 - 9 * a)], outline=(20, 20, 20), width=2)
    draw.rectangle([30, 130, 40, 140], outline=(20, 20, 20))
    draw.text((12, 140 - 9 * a // 2), str(a), fill=(200, 0, 0))
    draw.text((30 + 7 * b, 146), str(b), fill=(200, 0, 0))
    img.save(path)
    return a, b


def _chart_sum(rng: random.Random, path: Path, nth: int) -> tuple[str, str]:
    heights = _bar_chart(rng, path, rng.randint(3, 5))
    return "The bar chart shows one value per bar. What is the sum of all the values shown?", str(
        sum(heights)
    )


def _chart_count(rng: random.Random, path: Path, nth: int) -> tuple[str, str]:
    return "How many bars does the bar chart have?", str(len(_bar_chart(rng, path, 3 + nth % 2)))


def _triangle_area(rng: random.Random, path: Path, nth: int) -> tuple[str, str]:
    a, b = _triangle(rng, path)
    return "The figure shows a right triangle with its two legs labelled. What is its area?", _frac(
        Fraction(a * b, 2)
    )


def _triangle_choice(rng: random.Random, path: Path, nth: int) -> tuple[str, str]:
    a, b = _triangle(rng, path, vertical_longer=nth % 2 == 0)
    return ("The figure shows a right triangle with its two legs labelled. Which leg is longer?\n"
            "(A) the vertical leg\n(B) the horizontal leg", "A" if a > b else "B")  # fmt: skip


# Per six image problems: four whose answer is one of two (3 or 4 bars, leg A or B, alternating within
# the kind), which a cold-started model that cannot read the figure still answers right about half the
# time, so that groups of its rollouts have mixed rewards (ARES's online filter keeps those), and two that
# need the figure read (a sum, an area).
VL_KINDS = {"chart-count": _chart_count, "triangle-choice": _triangle_choice, "chart-sum": _chart_sum,
            "triangle-area": _triangle_area}  # fmt: skip
VL_CYCLE = ("chart-count", "triangle-choice", "chart-sum", "triangle-choice", "chart-count", "triangle-area")


def vl_split(name: str, n: int, seed: int, out: Path) -> list[dict]:
    """``n`` image problems of :data:`VL_CYCLE`'s kinds, their PNGs written under ``out/images/name``."""
    rng = random.Random(f"{name}-{seed}")
    (out / "images" / name).mkdir(parents=True, exist_ok=True)
    records, seen = [], dict.fromkeys(VL_KINDS, 0)
    for i in range(n):
        rel = f"images/{name}/{name}-{i:03d}.png"
        kind = VL_CYCLE[i % len(VL_CYCLE)]
        problem, answer = VL_KINDS[kind](rng, out / rel, seen[kind])
        seen[kind] += 1
        records.append({"id": f"rehearse-{name}-{i:03d}", "source": SOURCE, "problem": problem, "answer": answer,
                        "images": [rel], "meta": {"difficulty": kind}})  # fmt: skip
    return records


def choice_split(n: int, seed: int) -> list[dict]:
    rng = random.Random(f"choice-test-{seed}")
    records = []
    for i in range(n):
        a, b = rng.randint(11, 49), rng.randint(11, 49)
        right = a * b
        options = sorted(
            {right, *(right + d for d in rng.sample([-20, -11, -10, -2, -1, 1, 2, 9, 10, 21], 9))}
        )
        letters = "ABCDEFGHIJ"
        text = "\n".join(f"({letters[j]}) {v}" for j, v in enumerate(options))
        records.append({"id": f"rehearse-choice-test-{i:03d}", "source": SOURCE,
                        "problem": f"What is ${a} \\times {b}$?\n{text}",
                        "answer": letters[options.index(right)],
                        "meta": {"options": [str(v) for v in options], "difficulty": "arithmetic"}})  # fmt: skip
    return records


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows))


def write_all(out: Path = DATA_DIR, seed: int = 0) -> dict[str, int]:
    """(Re)write every stand-in file under ``out``; returns rows per file."""
    out.mkdir(parents=True, exist_ok=True)
    vl_train = vl_split("vl-train", 12, seed, out)
    files = {
        "math-train.jsonl": math_split("math-train", 16, seed, long_every=4),
        "math-val.jsonl": math_split("math-val", 4, seed),
        "math-test.jsonl": math_split("math-test", 6, seed, long_every=6),
        "teacher.jsonl": teacher_responses("math-train", 16, seed, long_every=4),
        "vl-train.jsonl": vl_train,
        "vl-teacher.jsonl": vl_teacher_responses(vl_train),
        "vl-test.jsonl": vl_split("vl-test", 6, seed, out),
        "choice-test.jsonl": choice_split(6, seed),
    }
    for name, rows in files.items():
        _write_jsonl(out / name, rows)
    return {name: len(rows) for name, rows in files.items()}


if __name__ == "__main__":
    print(json.dumps(write_all(), indent=2))
