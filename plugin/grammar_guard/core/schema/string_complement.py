"""The strings other than a few named ones, as an ECMA-262 ``pattern`` both engines read.

``{"type": "string", "not": {"enum": ["intramural"]}}`` (or an ``if`` on a
string property's value, whose ``else`` holds for the other strings) asks
for every string but some. Neither engine enforces ``not``, nor do
patterns have a complement, but a finite set of strings has one: read the
strings as a tree of their characters; a string is outside the set when it
ends where no named string ends, or leaves the tree by a character no named
string has there. Written from the root down::

    ^(?:|[^i]ANY*|i(?:|[^n]ANY*|n(?: ... l(?:ANY+) ... )))$

where ``ANY`` is any character. Only the final ``$`` is an anchor (xgrammar
ignores anchors inside a pattern), each named string adds a bounded number
of characters, and the nesting is as deep as the longest string, so both
are bounded.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

# The named strings' characters as a tree; END marks where one of them ends.
_Tree = dict[str, "_Tree"]
_END = "\0"  # no named string holds a control character

# The named strings read: more or longer ones are left as written.
MAX_STRINGS = 32
MAX_LENGTH = 32
# Any one character, a newline and a quote included (a class and its complement).
ANY = "(?:[^a]|a)"
_GROUP = "(?:"
# Patterns read back (strings_outside): each is read once however often a schema repeats it.
_REMEMBERED_PATTERNS = 256
# Characters a pattern must escape, outside a class and inside one.
_SPECIAL = frozenset("\\^$.|?*+()[]{}")
_CLASS_SPECIAL = frozenset("\\]^-[")


def pattern_outside(strings: Iterable[str]) -> str | None:
    """A pattern matching exactly the strings not in ``strings``; None past the bounds.

    None too for a string holding a control character, which a pattern
    would hold raw (the engines would write it unescaped).
    """
    named = set()
    for string in strings:
        if len(named) >= MAX_STRINGS or len(string) > MAX_LENGTH:
            return None
        if any(ord(char) < 0x20 or ord(char) == 0x7F for char in string):
            return None
        named.add(string)
    tree: _Tree = {}
    for string in named:
        node = tree
        for char in string:
            node = node.setdefault(char, {})
        node[_END] = {}
    return f"^(?:{_outside(tree)})$"


def _outside(node: _Tree) -> str:
    """The rest of a string outside the set, past the characters that led to ``node``."""
    children = sorted(char for char in node if char != _END)
    alternatives = [] if _END in node else [""]  # ending here
    if children:
        excluded = "".join(_in_class(char) for char in children)
        alternatives.append(f"[^{excluded}]{ANY}*")
        alternatives.extend(f"{_literal(char)}(?:{_outside(node[char])})" for char in children)
    else:
        alternatives.append(f"{ANY}+")  # past a named string's end
    return "|".join(alternatives)


def _literal(char: str) -> str:
    return f"\\{char}" if char in _SPECIAL else char


def _in_class(char: str) -> str:
    return f"\\{char}" if char in _CLASS_SPECIAL else char


@functools.lru_cache(maxsize=_REMEMBERED_PATTERNS)
def strings_outside(pattern: str) -> frozenset[str] | None:
    """The named strings of a :func:`pattern_outside` pattern; None if ``pattern`` is not one.

    So that a value can be decided against such a pattern without a regex
    engine (:mod:`evaluate`). The strings are read back from the tree the
    pattern writes out, then the pattern is written again from them: only
    a pattern that comes out the same is read, so the answer is exact. The
    reading stops at the first character out of place, and goes no deeper
    than :data:`MAX_LENGTH` groups.
    """
    start, end = f"^{_GROUP}", ")$"
    if not (pattern.startswith(start) and pattern.endswith(end)):
        return None
    named: list[str] = []
    stop = _read_group(pattern, len(start), "", named)
    if stop != len(pattern) - len(end) or pattern_outside(named) != pattern:
        return None
    return frozenset(named)


def _read_group(text: str, pos: int, prefix: str, named: list[str]) -> int | None:
    """Read one node's alternatives from ``pos`` into ``named``; where they end, or None."""
    if len(prefix) > MAX_LENGTH:
        return None
    if text.startswith(f"{ANY}+", pos):  # a named string ends here, and none goes on
        named.append(prefix)
        return pos + len(ANY) + 1
    if text.startswith("|", pos):
        pos += 1  # the empty alternative: no named string ends here
    else:
        named.append(prefix)
    pos = _past_class(text, pos)
    while pos is not None and text.startswith("|", pos):
        escaped = text.startswith("\\", pos + 1)
        char = text[pos + 1 + escaped : pos + 2 + escaped]
        pos += 2 + escaped
        if not char or not text.startswith(_GROUP, pos):
            return None
        pos = _read_group(text, pos + len(_GROUP), prefix + char, named)
        if pos is None or not text.startswith(")", pos):
            return None
        pos += 1
    return pos


def _past_class(text: str, pos: int) -> int | None:
    """Past ``[^...]`` and the ``ANY*`` after it, from ``pos``; None if they are not there."""
    if not text.startswith("[^", pos):
        return None
    pos += 2
    while pos < len(text) and text[pos] != "]":
        pos += 2 if text[pos] == "\\" else 1
    pos += 1
    return pos + len(ANY) + 1 if text.startswith(f"{ANY}*", pos) else None
