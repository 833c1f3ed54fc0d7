"""A pattern that starts with lookaheads, written without them.

``^(?!.*\\.\\.)[a-z.]+$`` (a name without two dots in a row), ``^(?=.*[0-9])``
...: neither engine reads lookarounds, so such a pattern was refused. Yet a
lookahead at the start of an anchored pattern is a condition on the whole
string: ``^(?=A)R`` matches the strings that both ``^(?:A)`` and ``^R``
match, and ``^(?!A)R`` those that ``^R`` matches and ``^(?:A)`` does not,
each read as a search (the lookahead's match may end anywhere, as its own
does). That is a boolean combination of patterns without lookarounds, which
:func:`pattern_complement.language_pattern` writes as one pattern where its
deterministic automaton is small.

Read: ``^``, then one or more ``(?=...)`` or ``(?!...)`` groups, then the
rest, with no ``|`` outside a group in the rest (``^(?=a)b|c`` puts the
lookahead on one alternative only). Every part must be a pattern
:mod:`pattern_match` reads (no lookaround inside a lookahead). Anything
else is left as written, and refused as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from grammar_guard.core.schema.pattern_complement import language_pattern
from grammar_guard.core.schema.pattern_match import MAX_PATTERN as MAX_PATTERN_READ

_LOOKAHEADS = ("(?=", "(?!")
_REMEMBERED = 256


def lookaheads_written(pattern: str) -> str | None:
    """``pattern`` with its leading lookaheads written out; None where it has none read here."""
    # Past what the matcher reads there is nothing to write, nor to remember.
    if not pattern.startswith("^(?") or len(pattern) > MAX_PATTERN_READ:
        return None
    return _written(pattern)


@functools.lru_cache(maxsize=_REMEMBERED)
def _written(pattern: str) -> str | None:
    position, conditions = 1, []
    while pattern.startswith(_LOOKAHEADS, position):
        end = _group_end(pattern, position)
        if end is None:
            return None
        conditions.append((pattern[position + 2] == "=", pattern[position + 3 : end]))
        position = end + 1
    rest = pattern[position:]
    if not conditions or _alternation_outside_groups(rest):
        return None
    signs = (True, *(positive for positive, _ in conditions))
    return language_pattern(
        ("^" + rest, *(f"^(?:{body})" for _, body in conditions)),
        lambda matched: matched == signs,
    )


def _group_end(pattern: str, start: int) -> int | None:
    """The index of the ``)`` closing the group opened at ``start``; None if it is not closed."""
    depth = 0
    for index, char in _outside_classes(pattern, start):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return index
    return None


def _alternation_outside_groups(pattern: str) -> bool:
    depth = 0
    for _, char in _outside_classes(pattern, 0):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "|" and depth == 0:
            return True
    return False


def _outside_classes(pattern: str, start: int) -> Iterator[tuple[int, str]]:
    """Each character of ``pattern`` from ``start`` on that is neither escaped nor in a class.

    A class ends at its first unescaped ``]``, as in ECMA-262 (``[]`` is the
    empty class).
    """
    index, in_class = start, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        else:
            yield index, char
        index += 1
