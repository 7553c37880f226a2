"""How a math answer is written, read before any parsing (pure string functions, no sympy).

The math grader (:mod:`ares_cli.grading.math_grader`) reads a gold or an answer as a list of items and
compares items with math-verify. What is decided here, on the text:

- **repairs**: control characters left by JSON escapes that ate a LaTeX command (``\\f``\\ rac → form feed +
  ``rac``, ``\\t``\\ ext → tab + ``ext``, ``\\b``\\ inom, ``\\r``\\ ight) are turned back into the command;
- **plain text** for comparing prose and times: ``\\text``/``\\mathrm`` wrappers, ``$``, LaTeX and Unicode
  spaces and a final period do not count;
- **items**: a top-level list split at commas, semicolons (also full-width) and ``and``; set braces
  ``\\{...\\}`` around the whole answer; tuples written one after another without separators
  (``(1,2)(3,4)``, only when every group holds a comma, so ``(x+1)(x+2)`` stays a product); one ``\\pm`` or
  ``\\mp`` per item expands into its two items; an ordering chain ``a < b < c`` is the ordered list
  ``a, b, c``; a tuple of names before the values (``(x, y) = (2, 3), (2, 7)``) is read off;
- **thousands**: ``10{,}000``, ``10,\\!000``, ``1\\,000`` and ``1 000`` (groups of three after a thin, plain or
  no-break space) are numbers; a bare ``110,143,242`` can be a number or a list (see :func:`thousands_groups`);
- **spacing**: spacing commands are spaces, but a row break ``\\\\`` stays one even when a space follows it;
- **repeating decimals**: ``0.\\overline{3}`` is the fraction 1/3 it writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN, _CLOSE = "([{", ")]}"
_CONTROL = {"\x0c": "\\f", "\x08": "\\b", "\x07": "\\a", "\x0b": "\\v"}
_TAB_COMMAND = re.compile(r"\t(?=[A-Za-z])")
_CR_COMMAND = re.compile(r"\r(?=ight|ho|angle|ceil|floor|brace|vert|brack)")
_WRAPPER = re.compile(r"\\(?:text|textrm|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_SPACES = re.compile(r"\\\\|\\[,;:! ]|\\q?quad(?![A-Za-z])|~|[\u00a0\u2000-\u200b\u202f\u205f\u3000]")
_MATH_DELIMS = re.compile(r"\\[()\[\]]|\$")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*")
_STYLE = re.compile(r"\\[dt](frac|binom)(?![A-Za-z])")
_WORD_SEP = re.compile(r"\\(?:text|mbox|mathrm|textrm)\s*\{\s*(and|or|OR)\s*\}")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![A-Za-z])|\\text\{\s*degrees?\s*\}")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})\s*(?:([ap])\.?\s*m\.?)?$", re.I)
_THOUSANDS_SHAPED = re.compile(r"-?\d{1,3}(?:,\d{3})+")
_THOUSANDS_MARKED = re.compile(r"(?<=\d)(?:\{,\}|,\\!\s*)(?=\d{3}(?!\d))")
_SPACE_SEP = r"(?:\\[,;: ]|\\thinspace(?![A-Za-z])\s*|~|[ \u00a0\u2009\u202f])"
_THOUSANDS_SPACED = re.compile(r"(?<![\d.,])\d{1,3}(?:" + _SPACE_SEP + r"\d{3})+(?:\.\d+)?(?![\d])")
_REPEATING = re.compile(r"(-?)(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{\s*(\d+)\s*\}")
_NAMES = re.compile(
    r"^\(\s*([A-Za-z](?:_\{?\w+\}?)?(?:\s*,\s*[A-Za-z](?:_\{?\w+\}?)?)+)\s*\)\s*=\s*(.+)$", re.S
)
_RELATION = re.compile(r"\\(?:leq?|geq?|lt|gt|leqslant|geqslant)(?![A-Za-z])|<=|>=|<|>")
_ASCENDING = {"<", "<=", "\\le", "\\leq", "\\lt", "\\leqslant"}
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[A-Za-z*]+\}")
_EQUIVALENCE = re.compile(r"\\(?:Leftrightarrow|iff|Longleftrightarrow)(?![A-Za-z])")


def repair_escapes(text: str) -> str:
    """Turn control characters that a JSON escape made of a LaTeX command back into the command."""
    if not any(ch < " " for ch in text):
        return text
    for char, command in _CONTROL.items():
        text = text.replace(char, command)
    text = _CR_COMMAND.sub(r"\\r", _TAB_COMMAND.sub(r"\\t", text))
    return text.replace("\t", " ").replace("\r", " ")


def control_characters(text: str) -> list[str]:
    """The control characters in ``text`` other than newlines, as ``repr`` names (``'\\x0c'``, ``'\\t'``)."""
    return sorted({repr(ch)[1:-1] for ch in text if ch < " " and ch != "\n"})


_DELIMITED = re.compile(r"^\s*(?:\$\$?|\\\[|\\\()(.*?)(?:\$\$?|\\\]|\\\))\s*$", re.S)


def strip_delimiters(text: str) -> str:
    """``text`` without math delimiters (``$...$``, ``\\[...\\]``, ``\\(...\\)``) around the whole of it."""
    while (m := _DELIMITED.match(text)) is not None and "$" not in m.group(1):
        text = m.group(1)
    return text.strip()


def has_relation(text: str) -> bool:
    """Whether ``text`` holds a relation sign (``=``, ``<``, ``\\le``, ...)."""
    return "=" in text or _RELATION.search(text) is not None


def despace(text: str) -> str:
    """Spacing commands and Unicode spaces as plain spaces; a row break ``\\\\`` stays one (``\\\\ `` is a
    row break and a space, not a spacing command after a backslash)."""
    return _SPACES.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", text)


def join_spaced_thousands(text: str) -> str:
    """``1\\,000`` and ``1 000`` (thin, plain or no-break space between groups of three) as ``1000``."""
    return _THOUSANDS_SPACED.sub(lambda m: re.sub(_SPACE_SEP, "", m.group(0)), text)


def exact_repeating_decimals(text: str) -> str:
    """``0.\\overline{3}`` (also ``\\bar``, ``\\dot``; ``0.1\\overline{6}``) as the fraction it writes."""

    def fraction(m: re.Match) -> str:
        sign, whole, fixed, period = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
        numerator = int(whole + fixed + period) - int(whole + fixed)
        denominator = (10 ** len(period) - 1) * 10 ** len(fixed)
        return f"{sign}\\frac{{{numerator}}}{{{denominator}}}"

    return _REPEATING.sub(fraction, text)


def plain_text(text: str) -> str:
    """``text`` without wrappers, math delimiters, spacing commands, repeated spaces and a final period."""
    text = _MATH_DELIMS.sub(" ", text)
    while (unwrapped := _WRAPPER.sub(r" \1 ", text)) != text:
        text = unwrapped
    text = _STYLE.sub(r"\\\1", _LEFT_RIGHT.sub("", despace(text)))
    return " ".join(text.split()).rstrip(".").strip()


def is_prose(text: str) -> bool:
    """Whether ``text`` says something in words (a word of three or more letters outside LaTeX commands)."""
    words = re.sub(r"\\[A-Za-z]+", " ", _ENVIRONMENT.sub(" ", plain_text(text)))
    return re.search(r"(?<![A-Za-z])[A-Za-z]{3,}(?![A-Za-z])", words) is not None


def clock_minutes(text: str) -> tuple[int, bool] | None:
    """``(minutes after midnight, has am/pm)`` of a clock time (``4:30 p.m.``, ``16:30``); None otherwise.

    Without am/pm a time before 13:00 is ambiguous (``4:30`` may be a ratio); the caller decides."""
    m = _TIME.match(plain_text(text).replace(" ", "") if ":" in text else "")
    if m is None:
        return None
    hours, minutes, half = int(m.group(1)), int(m.group(2)), (m.group(3) or "").lower()
    if minutes > 59 or hours > 23 or (half and not 1 <= hours <= 12):
        return None
    if half:
        hours = hours % 12 + (12 if half == "p" else 0)
    return hours * 60 + minutes, bool(half)


def strip_degrees(text: str) -> str:
    return _DEGREES.sub("", text)


def _scan(text: str):
    """Yield ``(index, char, depth after it)`` with brackets counted; ``\\{``/``\\}`` are one bracket token."""
    depth, i = 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            depth += 1 if text[i + 1] == "{" else -1
            yield i, text[i : i + 2], depth
            i += 2
            continue
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        yield i, ch, depth
        i += 1


def _split_top(text: str, separators: re.Pattern) -> list[str]:
    top = [i for i, _, depth in _scan(text) if depth == 0]
    top_set = set(top)
    parts, start = [], 0
    for m in separators.finditer(text):
        if m.start() in top_set and m.start() >= start:
            parts.append(text[start : m.start()])
            start = m.end()
    parts.append(text[start:])
    return [p.strip() for p in parts]


_LIST_SEP = re.compile(r",\s*(?:and|or)(?![A-Za-z])|,|;|；|，|(?<![A-Za-z\\])(?:and|or|OR)(?![A-Za-z])")
_OR_SEP = re.compile(r"(?<![A-Za-z\\])(?:or|OR)(?![A-Za-z])")


def _unwrap_set(text: str) -> str:
    """The inside of ``\\{ ... \\}`` when the braces enclose the whole text."""
    t = text.strip()
    if t.startswith("\\{") and t.endswith("\\}"):
        closes = [i for i, _, depth in _scan(t) if depth == 0]
        if closes and closes[0] == len(t) - 2:
            return t[2:-2].strip()
    return t


def _adjacent_tuples(item: str) -> list[str]:
    """``(1,2)(3,4)`` → ``["(1,2)", "(3,4)"]`` when the item is only tuples; else ``[item]``."""
    groups, start = [], None
    for i, ch, depth in _scan(item):
        if start is None:
            if ch == "(" and depth == 1:
                start = i
            elif not ch.isspace():
                return [item]
        elif ch == ")" and depth == 0:
            groups.append(item[start : i + 1])
            start = None
    if start is not None or len(groups) < 2:
        return [item]
    return groups if all(tuple_parts(g) for g in groups) else [item]


def expand_pm(item: str) -> list[str] | None:
    """One ``\\pm``/``\\mp`` → the two items it stands for; none → ``[item]``; several → None (unread)."""
    signs = re.findall(r"\\(?:pm|mp)(?![A-Za-z])", item)
    if not signs:
        return [item]
    if len(signs) > 1:
        return None
    first, second = ("+", "-") if signs[0] == "\\pm" else ("-", "+")
    pattern = re.compile(r"\\(?:pm|mp)(?![A-Za-z])")
    return [pattern.sub(first, item), pattern.sub(second, item)]


def ordering_chain(item: str) -> list[str] | None:
    """The parts of ``a < b < c`` (three or more parts, one direction) in the order written; else None."""
    parts, relations, start = [], [], 0
    top = {i for i, _, depth in _scan(item) if depth == 0}
    for m in _RELATION.finditer(item):
        if m.start() in top and m.start() >= start:
            parts.append(item[start : m.start()].strip())
            relations.append(m.group(0))
            start = m.end()
    parts.append(item[start:].strip())
    if len(parts) < 3 or not all(parts):
        return None
    ascending = {r in _ASCENDING for r in relations}
    return parts if len(ascending) == 1 else None


@dataclass(frozen=True)
class Items:
    """An answer read as items. ``chain``: the parts of an ordering chain ``a < b < c`` (read as the ordered
    list only against a list gold: ``1 < x < 3`` against an interval is one item); ``ordered``: a named
    tuple's values; ``names`` when written ``(names) = (values)``; ``unread`` when a part could not be
    read (several ``\\pm`` in one item)."""

    items: tuple[str, ...]
    chain: tuple[str, ...] | None = None
    ordered: bool = False
    names: tuple[str, ...] = ()
    unread: bool = False


def read_items(text: str) -> Items:
    """Read ``text`` (already repaired) as its list of items (module docstring)."""
    text = _WORD_SEP.sub(lambda m: f" {m.group(1).lower()} ", strip_degrees(text))
    text = join_spaced_thousands(exact_repeating_decimals(_THOUSANDS_MARKED.sub("", text)))
    text = _LEFT_RIGHT.sub("", despace(text))
    text = text.strip().rstrip(".").strip()
    names: tuple[str, ...] = ()
    if (m := _NAMES.match(text)) is not None:
        names = tuple(n.strip() for n in m.group(1).split(","))
        text = m.group(2).strip()
    text = _unwrap_set(text)
    raw = [p for p in _split_top(text, _LIST_SEP) if p]
    chain = ordering_chain(raw[0]) if len(raw) == 1 else None
    items: list[str] = []
    unread = False
    for part in raw:
        for group in _adjacent_tuples(part):
            expanded = expand_pm(group)
            unread |= expanded is None
            items += expanded or [group]
    if names and len(items) == 1 and (values := tuple_parts(items[0])) and len(values) == len(names):
        return Items(tuple(values), ordered=True, names=names, unread=unread)
    return Items(tuple(items), chain=tuple(chain) if chain else None, names=names, unread=unread)


def tuple_parts(item: str) -> list[str] | None:
    """The entries of one parenthesised tuple ``(a, b, ...)``; None when ``item`` is not one."""
    t = item.strip()
    if not (t.startswith("(") and t.endswith(")")):
        return None
    closes = [i for i, ch, depth in _scan(t) if depth == 0 and ch == ")"]
    if closes != [len(t) - 1]:
        return None
    parts = _split_top(t[1:-1], re.compile(","))
    return parts if len(parts) > 1 else None


def thousands_groups(text: str) -> list[str] | None:
    """The digit groups of a bare ``110,143,242`` (each group after the first three digits); else None.

    Such a text is a number with thousands separators or a list of numbers. The grader reads it as the
    number, and as the list too when the other side is a list: in order for up to four groups, as a
    multiset from five (a number of 13+ digits with separators is rarer than a list of numbers)."""
    t = text.strip()
    return t.split(",") if _THOUSANDS_SHAPED.fullmatch(t) else None


def equivalent_statements(text: str) -> list[str]:
    """The parts of ``A \\Leftrightarrow B`` (the gold states them as equivalent); ``[text]`` otherwise."""
    parts = [p for p in _split_top(text, _EQUIVALENCE) if p]
    return parts if len(parts) > 1 else [text]


def or_parts(text: str) -> list[str]:
    """The parts of ``A \\text{ or } B`` at the top level; ``[text]`` when there is no ``or``."""
    text = _WORD_SEP.sub(lambda m: f" {m.group(1).lower()} ", text)
    parts = [p for p in _split_top(text, _OR_SEP) if p]
    return parts if len(parts) > 1 else [text]


def equation_sides(text: str) -> list[str]:
    """The sides of ``A = B (= C ...)`` at the top level (not ``\\le``/``\\neq``); ``[text]`` without one."""
    parts = [p for p in _split_top(text, re.compile(r"(?<![<>!\\])=(?!=)")) if p]
    return parts if len(parts) > 1 else [text]
