"""Answer extraction: the content of the last top-level ``\\boxed{...}`` (or ``\\fbox{...}``)."""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BARE_TOKEN = re.compile(r"[ \t]+([^\s${}\\]+)")


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """Content of the brace group opening at ``text[start] == '{'`` and the index after it; None if unbalanced.

    Escaped braces (``\\{``, ``\\}``) are literal characters and do not count.
    """
    depth, i = 0, start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
        i += 1
    return None


def boxed_groups(text: str) -> list[tuple[int, int, str | None]]:
    """(start, end, content) of every top-level boxed group, in order; an unbalanced group ends the list
    with content None."""
    out: list[tuple[int, int, str | None]] = []
    pos = 0
    while (m := _BOX.search(text, pos)) is not None:
        j = m.end()
        while j < len(text) and text[j] in " \t\n":
            j += 1
        if j < len(text) and text[j] == "{":
            got = _braced(text, j)
            if got is None:
                out.append((m.start(), len(text), None))
                break
            out.append((m.start(), got[1], got[0]))
            pos = got[1]
            continue
        bare = _BARE_TOKEN.match(text, m.end())  # "\boxed 42" (TeX allows a single token argument)
        pos = bare.end() if bare else m.end()
        out.append((m.start(), pos, bare.group(1) if bare else None))
    return out


def boxed_spans(text: str) -> list[str | None]:
    """Contents of every top-level boxed group, in order; an unbalanced group ends the list with None."""
    return [content for _, _, content in boxed_groups(text)]


def extract_boxed(text: str | None) -> str | None:
    """The stripped content of the last top-level ``\\boxed{}``/``\\fbox{}``; None when absent, empty or unbalanced."""
    if not text:
        return None
    spans = boxed_spans(text)
    if not spans or spans[-1] is None:
        return None
    content = spans[-1].strip()
    return content or None
