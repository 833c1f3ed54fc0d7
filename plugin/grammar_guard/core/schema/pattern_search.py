"""A pattern's automaton read as ECMA-262 searches with it, for questions about its language.

:mod:`pattern_match` builds a Thompson automaton of a pattern and runs it
over one string. Questions about all strings at once (do two patterns share
one, which strings does one miss) walk the automaton instead, one reachable
set of states after another. :class:`SearchAutomaton` adds what a search
needs around the pattern's own states: a state before the match, which
reads any character and may start the match at any position, and one after
it, which reads any rest. ``^`` holds before the first character only, and
``$`` after the last only, so a path past ``$`` reads nothing more.

Characters are sets of code points from U+0000 to U+10FFFF, written as
sorted ranges. Those hold every string under either reading of a character
past U+FFFF (a pattern without the ``u`` flag reads it as two surrogates,
with it as one character), so what holds of all such strings holds for
both readings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from grammar_guard.core.schema.pattern_match import Automaton

LAST_CODE_POINT = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]
ANY_CHARACTER: Ranges = ((0, LAST_CODE_POINT),)


class Reach(NamedTuple):
    """What states reach without reading: the ones that read next, and whether the text matches."""

    readers: frozenset[int]
    matched: bool


@dataclass
class SearchAutomaton:
    """One pattern's automaton, with the states before and after its match added."""

    states: Automaton
    before: int = field(init=False)
    after: int = field(init=False)
    _reach: dict[tuple[int, bool], Reach] = field(default_factory=dict)
    _reads: dict[int, Ranges] = field(default_factory=dict)
    visits: int = 0  # states followed without reading, in all

    def __post_init__(self) -> None:
        self.before = len(self.states.states)
        self.after = self.before + 1

    def reads(self, state: int) -> Ranges:
        """The code points ``state`` reads, as sorted ranges."""
        found = self._reads.get(state)
        if found is None:
            found = self._reads[state] = self._ranges(state)
        return found

    def _ranges(self, state: int) -> Ranges:
        if state in (self.before, self.after):
            return ANY_CHARACTER
        chars = self.states.states[state].chars
        assert chars is not None
        ranges = tuple(sorted(chars.ranges))
        return complement(ranges) if chars.negated else ranges

    def goes_to(self, state: int) -> list[int]:
        """Where ``state`` goes once it has read a character."""
        if state in (self.before, self.after):
            return [state]
        return self.states.states[state].out

    def reach(self, heads: list[int], at_start: bool) -> Reach:
        """What ``heads`` reach together (a character state has one head, a loop two)."""
        reaches = [self._reach_one(head, at_start) for head in heads]
        if len(reaches) == 1:
            return reaches[0]
        readers = frozenset().union(*(one.readers for one in reaches))
        return Reach(readers, any(one.matched for one in reaches))

    def _reach_one(self, head: int, at_start: bool) -> Reach:
        found = self._reach.get((head, at_start))
        if found is None:
            found = self._reach[(head, at_start)] = self._reach_from(head, at_start)
        return found

    def _reach_from(self, head: int, at_start: bool) -> Reach:
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
        return Reach(frozenset(readers), matched)


def complement(ranges: Ranges) -> Ranges:
    """The code points outside sorted ``ranges``."""
    left: list[tuple[int, int]] = []
    low = 0
    for start, end in ranges:
        if start > low:
            left.append((low, start - 1))
        low = max(low, end + 1)
    if low <= LAST_CODE_POINT:
        left.append((low, LAST_CODE_POINT))
    return tuple(left)


def meet(first: Ranges, second: Ranges) -> bool:
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
