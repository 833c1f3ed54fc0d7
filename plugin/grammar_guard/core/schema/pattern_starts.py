"""The characters a string matching an anchored ECMA-262 ``pattern`` can start with.

Two patterns anchored at the start (``^https?://`` and ``^\\./``) whose
first characters share nothing match no string in common: that proves
``oneOf`` branches exclusive (:meth:`SchemaFacts.exclusive`). What is read
here is a superset, which keeps the proof sound: a construct not understood
stands for any character, a zero-width one (``\\b``, a lookaround) for none
but lets the next term decide, and a pattern that can match the empty
string, or that is not anchored in every alternative, proves nothing.

The reader is a single forward pass over the text with a bounded nesting
depth, so a hostile pattern costs time linear in its length.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_MAX_DEPTH = 64
# A quantifier's bounds, read where the brace stands and no further: "{2}", "{0,}", "{1,3}".
_BOUNDS = re.compile(r"\{([0-9]+)(?:,[0-9]*)?\}")
_DIGITS = ((ord("0"), ord("9")),)
_WORD = ((ord("0"), ord("9")), (ord("A"), ord("Z")), (ord("_"), ord("_")), (ord("a"), ord("z")))
_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
# What "." does not match (ECMA-262 line terminators).
_LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_ZERO_WIDTH_ESCAPES = frozenset("bB")


class Chars(NamedTuple):
    """A set of code points: the ``ranges`` listed, or all but them when ``negated``."""

    negated: bool
    ranges: tuple[tuple[int, int], ...]

    def union(self, other: Chars) -> Chars:
        if other == NONE:
            return self
        if self == NONE:
            return other
        if self.negated or other.negated:
            return ANY  # a superset, where all but some meets more
        return Chars(False, self.ranges + other.ranges)

    def disjoint(self, other: Chars) -> bool:
        if self.negated and other.negated:
            return False
        if self.negated or other.negated:
            excluded, listed = (self, other) if self.negated else (other, self)
            return all(_covered(span, excluded.ranges) for span in listed.ranges)
        return not any(
            low <= other_high and other_low <= high
            for low, high in self.ranges
            for other_low, other_high in other.ranges
        )


ANY = Chars(True, ())
NONE = Chars(False, ())


class _Unreadable(Exception):
    pass


def first_chars(pattern: str) -> Chars | None:
    """What a string ``pattern`` matches must start with; None: it proves nothing.

    None where an alternative is not anchored with ``^``, where the pattern
    can match the empty string, and where it cannot be read.
    """
    reader = _Reader(pattern)
    try:
        first, nullable = reader.alternation(anchored=True)
    except _Unreadable:
        return None
    if nullable or reader.pos != len(pattern):
        return None
    return first


def _covered(span: tuple[int, int], ranges: tuple[tuple[int, int], ...]) -> bool:
    """Whether every code point of ``span`` is in ``ranges``."""
    low, high = span
    for start, end in sorted(ranges):
        if start <= low <= end:
            low = end + 1
            if low > high:
                return True
    return False


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def alternation(self, *, anchored: bool = False) -> tuple[Chars, bool]:
        """The first characters of an alternation, and whether it can match nothing."""
        first, nullable = self.sequence(anchored=anchored)
        while self.peek() == "|":
            self.pos += 1
            more, more_nullable = self.sequence(anchored=anchored)
            first, nullable = first.union(more), nullable or more_nullable
        return first, nullable

    def sequence(self, *, anchored: bool) -> tuple[Chars, bool]:
        if anchored:
            if self.peek() != "^":
                raise _Unreadable  # matched anywhere in the string
            self.pos += 1
        first = NONE
        settled = False  # a term that cannot be empty decided the first character
        while self.peek() not in ("", "|", ")"):
            term, nullable = self.term()
            if not settled:
                first = first.union(term)
                settled = not nullable
        return first, not settled

    def term(self) -> tuple[Chars, bool]:
        chars, nullable = self.atom()
        if self.quantifier_may_skip():
            nullable = True
        return chars, nullable

    def atom(self) -> tuple[Chars, bool]:
        char = self.peek()
        self.pos += 1
        if char == "(":
            return self.group()
        if char == "[":
            return self.char_class(), False
        if char == "\\":
            return self.escape()
        if char in "^$":
            return NONE, True  # zero width
        if char == ".":
            return Chars(True, _LINE_TERMINATORS), False
        if char in "*+?{":
            return ANY, False  # a quantifier with nothing before it: read as any character
        return _one(ord(char)), False

    def group(self) -> tuple[Chars, bool]:
        if self.depth >= _MAX_DEPTH:
            raise _Unreadable
        lookaround = False
        if self.text.startswith("?", self.pos):
            for opening in ("?:", "?=", "?!", "?<=", "?<!"):
                if self.text.startswith(opening, self.pos):
                    self.pos += len(opening)
                    lookaround = opening != "?:"
                    break
            else:
                end = self.text.find(">", self.pos)  # a named group: (?<name>
                if not self.text.startswith("?<", self.pos) or end == -1:
                    raise _Unreadable
                self.pos = end + 1
        self.depth += 1
        first, nullable = self.alternation()
        self.depth -= 1
        if self.peek() != ")":
            raise _Unreadable
        self.pos += 1
        return (NONE, True) if lookaround else (first, nullable)

    def quantifier_may_skip(self) -> bool:
        """Reads a quantifier after an atom; whether it allows no occurrence at all."""
        char = self.peek()
        if char in ("*", "?"):
            self.pos += 1
            skip = True
        elif char == "+":
            self.pos += 1
            skip = False
        elif char == "{" and (bounds := _BOUNDS.match(self.text, self.pos)):
            self.pos = bounds.end()
            skip = not bounds.group(1).strip("0")  # {0}, {00,3}: may occur no time
        else:
            return False  # a brace that opens no bounds is read as the next atom
        if self.peek() == "?":  # lazy
            self.pos += 1
        return skip

    def escape(self) -> tuple[Chars, bool]:
        char = self.peek()
        if char in _ZERO_WIDTH_ESCAPES:
            self.pos += 1
            return NONE, True
        if (char.isdigit() and char != "0") or char == "k":
            self.pos += 1
            return ANY, True  # a back reference, which may match nothing
        return self.escaped_chars(), False

    def escaped_chars(self) -> Chars:
        """The characters an escape stands for, past the backslash (in a class or not)."""
        char = self.peek()
        self.pos += 1
        if char == "d":
            return Chars(False, _DIGITS)
        if char == "w":
            return Chars(False, _WORD)
        if char == "D":
            return Chars(True, _DIGITS)
        if char == "W":
            return Chars(True, _WORD)
        if char in _SIMPLE_ESCAPES:
            return _one(_SIMPLE_ESCAPES[char])
        if char in ("x", "u"):
            digits = 2 if char == "x" else 4
            code = self.text[self.pos : self.pos + digits]
            if len(code) == digits and all(c in "0123456789abcdefABCDEF" for c in code):
                self.pos += digits
                return _one(int(code, 16))
            return ANY
        if char == "" or char.isalnum():
            return ANY  # \s, \p{...}, \c: a superset
        return _one(ord(char))  # an escaped punctuation character is itself

    def char_class(self) -> Chars:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        unknown = False
        while self.peek() not in ("", "]"):
            low = self.class_member()
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("", "]"):
                self.pos += 1
                start, end = _single(low), _single(self.class_member())
                if start is None or end is None or start > end:
                    unknown = True  # a class escape as an end ("\\d-x" is three members)
                    continue
                ranges.append((start, end))
            elif low is None:
                unknown = True
            else:
                ranges.extend(low.ranges)
        if self.peek() != "]":
            raise _Unreadable
        self.pos += 1
        if unknown:
            return ANY
        return Chars(negated, tuple(ranges))

    def class_member(self) -> Chars | None:
        """One member of a class; None where it is not a plain set of characters."""
        char = self.peek()
        self.pos += 1
        if char != "\\":
            return _one(ord(char))
        chars = self.escaped_chars()
        return None if chars.negated or chars == ANY else chars


def _one(code: int) -> Chars:
    return Chars(False, ((code, code),))


def _single(chars: Chars | None) -> int | None:
    """The one code point ``chars`` holds, if it is one."""
    if chars is None or chars.negated or len(chars.ranges) != 1:
        return None
    low, high = chars.ranges[0]
    return low if low == high else None
