"""Whether some string matches two ECMA-262 patterns, decided on their automata.

A ``oneOf`` of string branches is exclusive when no string matches the
patterns of two of them: ``format: ipv4`` and ``format: ipv6`` once the
rewrite has written them as patterns, ``^[0-9]+$`` and ``^[0-9]+px$``. Their
first characters often overlap, so the test of first characters
(:mod:`pattern_starts`) cannot tell them apart; their languages can.

Both patterns are read as searches (:mod:`pattern_search`), and their
product is explored pair of states by pair of states: a string matches both
exactly when some path of the product reads it to a pair where both sides
have matched. Characters are compared as sets of every code point, so an
answer of "no string" holds under either reading of a character past U+FFFF.

The work is the number of state pairs visited and of states each side
follows without reading, bounded by the caller: past the bound, or for a
pattern :mod:`pattern_match` does not read, the answer is None (not
decided).
"""

from __future__ import annotations

from typing import NamedTuple

from grammar_guard.core.schema.pattern_match import MAX_PATTERN as MAX_PATTERN_READ
from grammar_guard.core.schema.pattern_match import automaton
from grammar_guard.core.schema.pattern_search import SearchAutomaton, meet

# Answers kept for the next comparison of the same patterns (the rewrite,
# each engine's analysis and narrowing compare them in turn), as many as
# this: the answer, or for one not decided the most work it was given.
_REMEMBERED = 1024
_answers: dict[tuple[str, str], bool | int] = {}


class Overlap(NamedTuple):
    """Whether a string matches both patterns (None: not decided), and the work it took."""

    found: bool | None
    work: int


def patterns_overlap(first: str, second: str, max_work: int) -> Overlap:
    """Whether some string holds a match of both patterns, doing ``max_work`` work at most."""
    if max(len(first), len(second)) > MAX_PATTERN_READ:
        return Overlap(None, 0)  # not read, and not remembered: it would outlive its request
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
    left, right = SearchAutomaton(left_automaton), SearchAutomaton(right_automaton)
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
            if not meet(left.reads(one), right.reads(other)):
                continue
            left_next = left.reach(left.goes_to(one), at_start=False)
            right_next = right.reach(right.goes_to(other), at_start=False)
            if left_next.matched and right_next.matched:
                return Overlap(True, work + left.visits + right.visits)
            reached.append((left_next.readers, right_next.readers))
    return Overlap(False, work + left.visits + right.visits)
