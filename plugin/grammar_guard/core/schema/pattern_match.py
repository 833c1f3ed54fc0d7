"""Whether a string matches an ECMA-262 ``pattern``, decided without Python's ``re``.

The rewrites decide a schema value by value where it names its values (an
``enum`` or ``const`` beside a ``not``, ``patternProperties``...), and a
``pattern`` there had no verdict: Python's ``re`` reads some ECMA-262
differently (``$`` before a final newline, Unicode ``\\d`` and ``\\w``,
``{,3}``) and backtracks, so a client's pattern on a client's string could
take exponential time. This reads the patterns of a common subset into a
Thompson automaton and runs it over the string, all states at once: time in
proportion to the pattern's size times the string's length, both bounded.

Read: characters, ``.``, classes (ranges, negation, ``\\d \\D \\w \\W \\s
\\S``, character escapes), the same escapes outside classes, groups
(capturing or ``(?:``), alternation, ``^`` and ``$``, and the greedy or lazy
quantifiers ``* + ? {m} {m,} {m,n}`` (a brace that opens no bound is itself,
as ECMA-262's Annex B reads it). Anything else (lookarounds, back
references, ``\\b``, ``\\p``, named groups, an identity escape of a letter)
and any string or pattern with a character past U+FFFF (which the pattern
would read as two UTF-16 units) gets None: not decided.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

# The longest pattern read (formats.py writes some of 2-3k characters), the
# most automaton states built (a counted
# repetition is built once per count), and the most state visits one string
# may cost (states times characters): past them, not decided.
MAX_PATTERN = 4096
MAX_STATES = 4096
MAX_WORK = 200_000
_REMEMBERED = 256

_Ranges = tuple[tuple[int, int], ...]
_DIGIT: _Ranges = ((0x30, 0x39),)
_WORD: _Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
# ECMA-262 WhiteSpace and LineTerminator.
_SPACE: _Ranges = (
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
)  # fmt: skip
_LINE_TERMINATORS: _Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_SHORTHANDS = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CONTROL_ESCAPES = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_BOUNDS = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_HEX = frozenset("0123456789abcdefABCDEF")


class _Unread(Exception):
    """A construct outside the subset read here."""


@dataclass(frozen=True)
class _Chars:
    """A set of code points: within ``ranges``, or outside them when ``negated``."""

    negated: bool
    ranges: _Ranges

    def holds(self, code: int) -> bool:
        return any(low <= code <= high for low, high in self.ranges) != self.negated


# Nodes of a parsed pattern.
@dataclass
class _Alternation:
    branches: list[list[object]]


@dataclass
class _Repeat:
    node: object
    least: int
    most: int | None


@dataclass
class _Anchor:
    at_start: bool


@dataclass
class _State:
    """One automaton state: a character test, an anchor, a fork, or the match."""

    kind: str  # "chars", "start", "end", "split", "match"
    chars: _Chars | None = None
    out: list[int] = field(default_factory=list)


class Automaton(NamedTuple):
    """A pattern's automaton: its states, and the one a match starts in."""

    states: tuple[_State, ...]
    start: int


def match_work(pattern: str, text: str) -> int | None:
    """What deciding ``pattern`` on ``text`` costs, in state visits at most; None: not decided."""
    read = automaton(pattern)
    return None if read is None else len(read.states) * (len(text) + 1)


def pattern_matches(pattern: str, text: str) -> bool | None:
    """Whether ``text`` holds a match of ``pattern`` (ECMA-262, no flags); None: not decided."""
    if any(ord(char) > 0xFFFF for char in text):
        return None
    read = automaton(pattern)
    if read is None or len(read.states) * (len(text) + 1) > MAX_WORK:
        return None
    return _runs_to_match(read.states, read.start, text)


@functools.lru_cache(maxsize=_REMEMBERED)
def automaton(pattern: str) -> Automaton | None:
    """The states of ``pattern``'s automaton and its start; None if it is not read here."""
    if len(pattern) > MAX_PATTERN or any(ord(char) > 0xFFFF for char in pattern):
        return None
    try:
        tree = _Parser(pattern).parse()
        builder = _Builder()
        start = builder.build(tree, builder.add(_State("match")))
    except (_Unread, RecursionError):
        return None
    return Automaton(tuple(builder.states), start)


def _runs_to_match(states: tuple[_State, ...], start: int, text: str) -> bool:
    """Whether the automaton matches somewhere in ``text`` (ECMA-262's search)."""
    current: set[int] = set()
    for position in range(len(text) + 1):
        current |= _closure(states, {start}, position, len(text))  # a match may start here
        if any(states[index].kind == "match" for index in current):
            return True
        if position == len(text):
            break
        code = ord(text[position])
        stepped = {
            target
            for index in current
            if (chars := states[index].chars) is not None and chars.holds(code)
            for target in states[index].out
        }
        current = _closure(states, stepped, position + 1, len(text))
    return False


def _closure(states: tuple[_State, ...], heads: set[int], position: int, length: int) -> set[int]:
    """``heads`` and every state they reach without reading a character at ``position``."""
    reached: set[int] = set()
    pending = list(heads)
    while pending:
        index = pending.pop()
        if index in reached:
            continue
        reached.add(index)
        state = states[index]
        anchor_holds = (state.kind == "start" and position == 0) or (
            state.kind == "end" and position == length
        )
        if state.kind == "split" or anchor_holds:
            pending.extend(state.out)
    return reached


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.pos += 1
        return char

    def parse(self) -> _Alternation:
        tree = self.alternation()
        if self.pos != len(self.text):
            raise _Unread  # a ")" that closes nothing
        return tree

    def alternation(self) -> _Alternation:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        return _Alternation(branches)

    def sequence(self) -> list[object]:
        items: list[object] = []
        while self.peek() not in ("", "|", ")"):
            atom = self.atom()
            items.append(self.quantified(atom))
        return items

    def quantified(self, atom: object) -> object:
        char = self.peek()
        bounds = _BOUNDS.match(self.text, self.pos) if char == "{" else None
        if char in ("*", "+", "?"):
            self.pos += 1
            least, most = {"*": (0, None), "+": (1, None), "?": (0, 1)}[char]
        elif bounds is not None:
            self.pos = bounds.end()
            least = int(bounds[1])
            most = least if bounds[2] is None else (int(bounds[3]) if bounds[3] else None)
            if most is not None and most < least:
                raise _Unread  # a syntax error in ECMA-262
        else:
            return atom
        if isinstance(atom, _Anchor):
            raise _Unread
        if self.peek() == "?":
            self.pos += 1  # lazy: the same strings match
        if self.peek() in ("*", "+", "?") or _BOUNDS.match(self.text, self.pos):
            raise _Unread  # a quantifier on a quantifier: a syntax error
        return _Repeat(atom, least, most)

    def atom(self) -> object:
        char = self.take()
        if char == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise _Unread  # lookarounds, named groups
            group = self.alternation()
            if self.take() != ")":
                raise _Unread
            return group
        if char in ("*", "+", "?"):
            raise _Unread  # nothing to repeat
        if char == "{" and _BOUNDS.match(self.text, self.pos - 1):
            raise _Unread
        if char == "^":
            return _Anchor(at_start=True)
        if char == "$":
            return _Anchor(at_start=False)
        if char == ".":
            return _Chars(True, _LINE_TERMINATORS)
        if char == "[":
            return self.char_class()
        if char == "\\":
            return self.escape(in_class=False)
        return _Chars(False, ((ord(char), ord(char)),))

    def escape(self, *, in_class: bool) -> _Chars:
        char = self.take()
        lower = char.lower()
        if lower in _SHORTHANDS:
            return _Chars(char.isupper(), _SHORTHANDS[lower])
        if char in _CONTROL_ESCAPES:
            code = _CONTROL_ESCAPES[char]
        elif char == "0" and not self.peek().isdigit():
            code = 0
        elif char in ("x", "u"):
            digits = self.text[self.pos : self.pos + (2 if char == "x" else 4)]
            if len(digits) != (2 if char == "x" else 4) or not set(digits) <= _HEX:
                raise _Unread
            self.pos += len(digits)
            code = int(digits, 16)
        elif in_class and char == "b":
            code = 0x08  # a backspace, inside a class
        elif char == "" or char.isalnum() or char == "_":
            raise _Unread  # \b, \B, back references, \c, \p, \k, identity escapes of letters
        else:
            code = ord(char)  # an escaped punctuation character is itself
        return _Chars(False, ((code, code),))

    def char_class(self) -> _Chars:
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        if self.peek() == "]":
            raise _Unread  # [] and [^]: ECMA-262's empty and full classes, read apart
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if self.peek() == "":
                raise _Unread
            low = self.class_member()
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("", "]"):
                self.pos += 1
                first, last = _single(low), _single(self.class_member())
                if first is None or last is None or first > last:
                    raise _Unread  # a class escape at an end, or out of order
                ranges.append((first, last))
            elif low.negated:
                raise _Unread  # \D, \W, \S inside a class: not a union of ranges here
            else:
                ranges.extend(low.ranges)
        self.pos += 1
        return _Chars(negated, tuple(ranges))

    def class_member(self) -> _Chars:
        char = self.take()
        if char == "\\":
            return self.escape(in_class=True)
        if char == "[":
            raise _Unread  # read alike by ECMA-262, differently by other dialects
        return _Chars(False, ((ord(char), ord(char)),))


def _single(chars: _Chars) -> int | None:
    if chars.negated or len(chars.ranges) != 1 or chars.ranges[0][0] != chars.ranges[0][1]:
        return None
    return chars.ranges[0][0]


class _Builder:
    """Thompson's construction: each node built backwards from the state it leads to."""

    def __init__(self) -> None:
        self.states: list[_State] = []

    def add(self, state: _State) -> int:
        if len(self.states) >= MAX_STATES:
            raise _Unread
        self.states.append(state)
        return len(self.states) - 1

    def build(self, node: object, then: int) -> int:
        """The state that reads ``node`` and goes on to ``then``."""
        if isinstance(node, _Chars):
            return self.add(_State("chars", node, [then]))
        if isinstance(node, _Anchor):
            return self.add(_State("start" if node.at_start else "end", out=[then]))
        if isinstance(node, _Alternation):
            starts = [self.sequence(branch, then) for branch in node.branches]
            return starts[0] if len(starts) == 1 else self.add(_State("split", out=starts))
        if isinstance(node, _Repeat):
            return self.repeat(node, then)
        raise _Unread

    def sequence(self, items: list[object], then: int) -> int:
        for item in reversed(items):
            then = self.build(item, then)
        return then

    def repeat(self, node: _Repeat, then: int) -> int:
        if node.most is None:
            loop = self.add(_State("split"))  # its edges once the body exists
            self.states[loop].out = [self.build(node.node, loop), then]
            entry = loop
        else:
            # Each optional copy may be the last: entry_k reads 0 to k copies.
            entry = then
            for _ in range(node.most - node.least):
                entry = self.add(_State("split", out=[self.build(node.node, entry), then]))
        for _ in range(node.least):
            entry = self.build(node.node, entry)
        return entry
