"""Whether some string matches two ECMA-262 patterns, decided on their automata.

A ``oneOf`` of string branches is exclusive when no string matches the
patterns of two of them: ``format: ipv4`` and ``format: ipv6`` once the
rewrite has written them as patterns, ``^[0-9]+$`` and ``^[0-9]+px$``. Their
first characters often overlap, so the test of first characters
(:mod:`pattern_starts`) cannot tell them apart; their languages can.

Both patterns are read into :mod:`pattern_match`'s Thompson automata, and
their product is explored pair of states by pair of states: a string
matches both exactly when some path of the product reads it to a pair where
both sides have matched. Each side searches as ECMA-262 does: it may start
its match at any position (a state before the match reads any character)
and, once matched, reads any rest (a state after it). ``^`` holds before
the first character only; ``$`` after the last only, so a side past ``$``
reads nothing more.

Characters are compared as sets of code points from U+0000 to U+10FFFF.
Those hold every string under either reading of a character past U+FFFF (a
pattern without the ``u`` flag reads it as two surrogates, with it as one
character), so an answer of "no string" holds for both readings.

The work is the number of state pairs visited and of states each side
follows without reading, bounded by the caller: past the bound, or for a
pattern :mod:`pattern_match` does not read, the answer is None (not
decided).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from grammar_guard.core.schema.pattern_match import Automaton, automaton

_LAST_CODE_POINT = 0x10FFFF
# Answers kept for the next comparison of the same patterns (the rewrite,
# each engine's analysis and narrowing compare them in turn), as many as
# this: the answer, or for one not decided the most work it was given.
_REMEMBERED = 1024
_answers: dict[tuple[str, str], bool | int] = {}
_ANY: tuple[tuple[int, int], ...] = ((0, _LAST_CODE_POINT),)


class Overlap(NamedTuple):
    """Whether a string matches both patterns (None: not decided), and the work it took."""

    found: bool | None
    work: int


class _Reach(NamedTuple):
    """What one side reaches without reading: states that read next, and whether it has matched."""

    readers: frozenset[int]
    matched: bool


@dataclass
class _Side:
    """One pattern's automaton, with the states before and after its match added."""

    states: Automaton
    before: int = field(init=False)
    after: int = field(init=False)
    _reach: dict[tuple[int, bool], _Reach] = field(default_factory=dict)
    _reads: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    visits: int = 0  # states followed without reading, in all

    def __post_init__(self) -> None:
        self.before = len(self.states.states)
        self.after = self.before + 1

    def reads(self, state: int) -> tuple[tuple[int, int], ...]:
        """The code points ``state`` reads, as sorted ranges."""
        found = self._reads.get(state)
        if found is None:
            found = self._reads[state] = self._ranges(state)
        return found

    def _ranges(self, state: int) -> tuple[tuple[int, int], ...]:
        if state in (self.before, self.after):
            return _ANY
        chars = self.states.states[state].chars
        assert chars is not None
        ranges = tuple(sorted(chars.ranges))
        return _complement(ranges) if chars.negated else ranges

    def goes_to(self, state: int) -> list[int]:
        """Where ``state`` goes once it has read a character."""
        if state in (self.before, self.after):
            return [state]
        return self.states.states[state].out

    def reach(self, heads: list[int], at_start: bool) -> _Reach:
        """What ``heads`` reach together (a character state has one head, a loop two)."""
        reaches = [self._reach_one(head, at_start) for head in heads]
        if len(reaches) == 1:
            return reaches[0]
        readers = frozenset().union(*(one.readers for one in reaches))
        return _Reach(readers, any(one.matched for one in reaches))

    def _reach_one(self, head: int, at_start: bool) -> _Reach:
        found = self._reach.get((head, at_start))
        if found is None:
            found = self._reach[(head, at_start)] = self._reach_from(head, at_start)
        return found

    def _reach_from(self, head: int, at_start: bool) -> _Reach:
        readers: set[int] = set()
        matched = False
        seen: set[tuple[int, bool]] = set()
        pending = [(head, False)]  # (state, past a "$": may read nothing more)
        while pending:
            state, ended = pending.pop()
            if (state, ended) in seen:
                continue
            seen.add((state, ended))
            self.visits += 1
            if state in (self.before, self.after):
                readers.update(() if ended else (state,))
                matched |= state == self.after
                if state == self.before:
                    pending.append((self.states.start, ended))
                continue
            node = self.states.states[state]
            if node.kind == "chars":
                readers.update(() if ended else (state,))
            elif node.kind == "match":
                pending.append((self.after, ended))
            elif node.kind == "split" or (node.kind == "start" and at_start):
                pending.extend((target, ended) for target in node.out)
            elif node.kind == "end":
                pending.extend((target, True) for target in node.out)
        return _Reach(frozenset(readers), matched)


def patterns_overlap(first: str, second: str, max_work: int) -> Overlap:
    """Whether some string holds a match of both patterns, doing ``max_work`` work at most."""
    key = (first, second)
    known = _answers.get(key)
    if isinstance(known, bool):
        return Overlap(known, 0)
    if known is not None and known >= max_work:
        return Overlap(None, 0)
    answer = _explored(first, second, max_work)
    if len(_answers) >= _REMEMBERED:
        _answers.clear()
    _answers[key] = max_work if answer.found is None else answer.found
    return answer


def _explored(first: str, second: str, max_work: int) -> Overlap:
    left_automaton, right_automaton = automaton(first), automaton(second)
    if left_automaton is None or right_automaton is None:
        return Overlap(None, 0)
    left, right = _Side(left_automaton), _Side(right_automaton)
    left_start = left.reach([left.before], at_start=True)
    right_start = right.reach([right.before], at_start=True)
    if left_start.matched and right_start.matched:
        return Overlap(True, 1)
    seen: set[tuple[int, int]] = set()
    work = 0
    reached = [(left_start.readers, right_start.readers)]
    while reached:
        # Every pair two reaches make costs a unit, seen or not: the bound holds
        # however many states each side reaches at once.
        left_readers, right_readers = reached.pop()
        for pair in ((a, b) for a in left_readers for b in right_readers):
            work += 1
            if work + left.visits + right.visits > max_work:
                return Overlap(None, work + left.visits + right.visits)
            if pair in seen:
                continue
            seen.add(pair)
            one, other = pair
            if not _meet(left.reads(one), right.reads(other)):
                continue
            left_next = left.reach(left.goes_to(one), at_start=False)
            right_next = right.reach(right.goes_to(other), at_start=False)
            if left_next.matched and right_next.matched:
                return Overlap(True, work + left.visits + right.visits)
            reached.append((left_next.readers, right_next.readers))
    return Overlap(False, work + left.visits + right.visits)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    left: list[tuple[int, int]] = []
    low = 0
    for start, end in ranges:
        if start > low:
            left.append((low, start - 1))
        low = max(low, end + 1)
    if low <= _LAST_CODE_POINT:
        left.append((low, _LAST_CODE_POINT))
    return tuple(left)


def _meet(first: tuple[tuple[int, int], ...], second: tuple[tuple[int, int], ...]) -> bool:
    """Whether two sorted lists of ranges share a code point."""
    i = j = 0
    while i < len(first) and j < len(second):
        (low, high), (other_low, other_high) = first[i], second[j]
        if low <= other_high and other_low <= high:
            return True
        if high < other_high:
            i += 1
        else:
            j += 1
    return False
