"""The strings a pattern does not match, as a pattern: its automaton determinised and complemented.

``{"type": "string", "not": {"pattern": "^x-"}}`` asks for the strings that
do not start with ``x-``. Neither engine enforces ``not``, but the strings a
pattern misses are a regular language too, and a small one has a pattern of
its own. :mod:`class_run_complement` writes that of one repeated class;
:func:`automaton_complement` that of any pattern :mod:`pattern_match` reads
whose deterministic automaton is small. It is one case of
:func:`language_pattern`, which writes any boolean combination of patterns
(:mod:`pattern_lookaheads` writes lookaheads so):

1. the characters the patterns tell apart are grouped into classes, every
   code point of a class leading to the same states;
2. the patterns' search automata (:mod:`pattern_search`) are determinised
   together over those classes: a state is, per pattern, the set of states
   reached and whether the text read so far matches; a set holding the
   state after a match matches whatever follows, and is one sink;
3. a state is accepting where the combination takes its verdicts; the
   automaton is minimised, and the states from which no accepting one can
   be reached are dropped;
4. the states left are eliminated one by one into a regular expression,
   anchored at both ends (only the final ``$`` is an anchor, as
   :mod:`string_complement` writes them: xgrammar ignores inner ones).

A class is written as itself or as its negation, whichever lists no control
character but tab, newline, vertical tab, form feed and carriage return
(written as escapes) and no DEL; a class that cannot be written either way
leaves the language without a pattern here. Surrogates are left out of both
forms: no engine writes one, and no JSON text it writes holds one.

Exact for every string without a lone surrogate (property-tested with
:mod:`pattern_match` as the reader of both). Bounded: the pattern's
automaton, the classes, the deterministic states and the pattern written
each have a limit, past which there is no complement.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Sequence

from grammar_guard.core.schema.pattern_match import MAX_PATTERN as MAX_PATTERN_READ
from grammar_guard.core.schema.pattern_match import automaton
from grammar_guard.core.schema.pattern_search import (
    LAST_CODE_POINT,
    Ranges,
    Reach,
    SearchAutomaton,
    complement,
)
from grammar_guard.core.schema.string_complement import ANY

MAX_AUTOMATON_STATES = 512
MAX_CLASSES = 32
MAX_STATES = 32
MAX_PATTERN = 2048
_REMEMBERED = 256
_SURROGATES = (0xD800, 0xDFFF)
# Control characters a class may list, as the escapes both engines read.
_ESCAPES = {0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r"}
_CLASS_SPECIAL = frozenset("\\]^-[")
# One pattern's part of a state: the states reached, and whether the text matches. A set
# holding the state after a match matches whatever follows: one sink stands for all such.
_Part = tuple[frozenset[int], bool]
_SINK_PART: _Part = (frozenset({-1}), True)
# Whether a string is in the language, from whether it matches each pattern.
Verdict = Callable[[tuple[bool, ...]], bool]


class _TooLarge(Exception):
    """Past one of the bounds: no complement is written."""


def automaton_complement(pattern: str) -> str | None:
    """A pattern matching exactly the strings ``pattern`` does not; None where none is written."""
    # A pattern the matcher does not read is not remembered either: a client's
    # megabyte pattern must not outlive its request in the cache.
    return None if len(pattern) > MAX_PATTERN_READ else _complement_of(pattern)


@functools.lru_cache(maxsize=_REMEMBERED)
def _complement_of(pattern: str) -> str | None:
    return language_pattern((pattern,), lambda matched: not matched[0])


def language_pattern(patterns: Sequence[str], accepts: Verdict) -> str | None:
    """A pattern of the strings whose matches of ``patterns`` (a verdict each) ``accepts`` takes.

    The complement is ``accepts = not matched[0]``; a lookahead's condition
    (:mod:`pattern_lookaheads`) another combination. None where a pattern is
    not read or a bound is passed.
    """
    reads = [automaton(pattern) for pattern in patterns]
    if any(read is None for read in reads):
        return None
    searches = [SearchAutomaton(read) for read in reads if read is not None]
    if sum(len(search.states.states) for search in searches) > MAX_AUTOMATON_STATES:
        return None
    try:
        classes = _classes(searches)
        transitions, matching = _determinised(searches, classes)
        transitions, accepting = _minimised(transitions, [accepts(each) for each in matching])
        return _written(transitions, accepting, classes)
    except _TooLarge:
        return None


# --- 1. classes -------------------------------------------------------------------

# Per pattern, the character states that read a class.
_Signature = tuple[frozenset[int], ...]


def _classes(searches: list[SearchAutomaton]) -> list[tuple[Ranges, _Signature]]:
    """Each class of code points: its ranges, and per pattern the character states that read it."""
    readers = [
        [index for index, state in enumerate(search.states.states) if state.kind == "chars"]
        for search in searches
    ]
    bounds = {0, LAST_CODE_POINT + 1, _SURROGATES[0], _SURROGATES[1] + 1}
    for search, states in zip(searches, readers, strict=True):
        for state in states:
            for low, high in search.reads(state):
                bounds.update((low, high + 1))
    edges = sorted(bounds)
    if len(edges) > 4 * MAX_CLASSES:
        raise _TooLarge
    grouped: dict[_Signature, list[tuple[int, int]]] = {}
    for low, next_low in itertools.pairwise(edges):
        if _SURROGATES[0] <= low <= _SURROGATES[1]:
            continue
        signature = tuple(
            frozenset(state for state in states if _holds(search.reads(state), low))
            for search, states in zip(searches, readers, strict=True)
        )
        grouped.setdefault(signature, []).append((low, next_low - 1))
    if len(grouped) > MAX_CLASSES:
        raise _TooLarge
    return [(tuple(ranges), signature) for signature, ranges in grouped.items()]


def _holds(ranges: Ranges, code: int) -> bool:
    index = bisect.bisect_right(ranges, (code, LAST_CODE_POINT + 1)) - 1
    return index >= 0 and ranges[index][0] <= code <= ranges[index][1]


# --- 2. determinised ----------------------------------------------------------------


def _determinised(
    searches: list[SearchAutomaton], classes: list[tuple[Ranges, _Signature]]
) -> tuple[list[list[int]], list[tuple[bool, ...]]]:
    """Each state's successor per class, and per pattern whether the text read to it matches.

    A state is, per pattern, the set of states reached (or the sink, once a
    match is certain) and whether the text matches; state 0 is the start.
    """
    keys: dict[tuple[_Part, ...], int] = {}
    transitions: list[list[int]] = []
    matching: list[tuple[bool, ...]] = []
    pending: list[tuple[int, tuple[_Part, ...]]] = []

    def state_of(reaches: list[Reach]) -> int:
        key = tuple(
            _SINK_PART if search.after in reach.readers else (reach.readers, reach.matched)
            for search, reach in zip(searches, reaches, strict=True)
        )
        if key not in keys:
            if len(keys) >= MAX_STATES:
                raise _TooLarge
            keys[key] = len(transitions)
            transitions.append([])
            matching.append(tuple(matched for _, matched in key))
            pending.append((keys[key], key))
        return keys[key]

    state_of([search.reach([search.before], at_start=True) for search in searches])
    while pending:
        index, key = pending.pop()
        transitions[index] = [
            state_of(
                [
                    _stepped(search, part, readers)
                    for search, part, readers in zip(searches, key, signature, strict=True)
                ]
            )
            for _, signature in classes
        ]
    return transitions, matching


def _stepped(search: SearchAutomaton, part: _Part, readers: frozenset[int]) -> Reach:
    """Where one pattern's ``part`` of a state goes on a character its ``readers`` read."""
    if part == _SINK_PART:
        return Reach(frozenset({search.after}), True)
    heads = [
        target
        for state in part[0]
        if state == search.before or state in readers
        for target in search.goes_to(state)
    ]
    return search.reach(heads, at_start=False)


# --- 3. minimised -------------------------------------------------------------------


def _minimised(
    transitions: list[list[int]], matching: list[bool]
) -> tuple[list[list[int]], list[bool]]:
    """The same automaton with equivalent states merged (Moore's refinement), state 0 first."""
    block = [int(matches) for matches in matching]
    while True:
        signatures = [(block[s], *(block[t] for t in row)) for s, row in enumerate(transitions)]
        numbered: dict[tuple[int, ...], int] = {}
        for signature in [signatures[0], *signatures]:
            numbered.setdefault(signature, len(numbered))
        refined = [numbered[signature] for signature in signatures]
        if len(numbered) == len(set(block)):
            break
        block = refined
    merged: list[list[int]] = [[] for _ in numbered]
    merged_matching = [False] * len(numbered)
    for state, row in enumerate(transitions):
        merged[refined[state]] = [refined[target] for target in row]
        merged_matching[refined[state]] = matching[state]
    return merged, merged_matching


# --- 4. written ---------------------------------------------------------------------


def _written(
    transitions: list[list[int]],
    accepting: list[bool],
    classes: list[tuple[Ranges, frozenset[int]]],
) -> str | None:
    """The pattern of the strings taking the automaton from state 0 to an accepting state."""
    live = _reaching(transitions, accepting)
    if 0 not in live:
        return None  # no string is outside: nothing to write
    start, final = len(transitions), len(transitions) + 1
    edges: dict[int, dict[int, str]] = {state: {} for state in [*live, start, final]}
    edges[start][0] = ""
    for state in live:
        if accepting[state]:
            edges[state][final] = ""
        targets: dict[int, list[tuple[int, int]]] = {}
        for (ranges, _), target in zip(classes, transitions[state], strict=True):
            if target in live:
                targets.setdefault(target, []).extend(ranges)
        for target, ranges in targets.items():
            edges[state][target] = _class(sorted(ranges))
    for state in sorted(live, key=lambda s: _degree(edges, s)):
        _eliminate(edges, state)
    return f"^(?:{edges[start].get(final, '')})$"


def _reaching(transitions: list[list[int]], accepting: list[bool]) -> set[int]:
    """The states from which an accepting state can be reached."""
    into: dict[int, set[int]] = {}
    for state, row in enumerate(transitions):
        for target in row:
            into.setdefault(target, set()).add(state)
    live = {state for state, accepts in enumerate(accepting) if accepts}
    pending = list(live)
    while pending:
        for source in into.get(pending.pop(), ()):
            if source not in live:
                live.add(source)
                pending.append(source)
    return live


def _degree(edges: dict[int, dict[int, str]], state: int) -> int:
    incoming = sum(1 for source, out in edges.items() if state in out and source != state)
    return incoming * len([target for target in edges[state] if target != state])


def _eliminate(edges: dict[int, dict[int, str]], state: int) -> None:
    """Remove ``state``, writing each path through it onto the edge that bypasses it."""
    out = edges.pop(state)
    loop = out.pop(state, None)
    middle = "" if loop is None else f"(?:{loop})*"
    for targets in edges.values():
        if state not in targets:
            continue
        into = targets.pop(state)
        for target, label in out.items():
            path = into + middle + label
            before = targets.get(target)
            targets[target] = path if before is None else f"(?:{before}|{path})"
            if len(targets[target]) > MAX_PATTERN:
                raise _TooLarge


def _class(ranges: list[tuple[int, int]]) -> str:
    """A pattern for one character of ``ranges`` (sorted, surrogates left out)."""
    merged: list[tuple[int, int]] = []
    for low, high in ranges:
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    outside = _without_surrogates(complement(tuple(merged)))
    if not outside:
        return ANY
    listed = _listed(merged)
    negated = _listed(outside)
    if negated is not None and (listed is None or len(negated) < len(listed)):
        return f"[^{negated}]"
    if listed is None:
        raise _TooLarge
    return f"[{listed}]"


def _without_surrogates(ranges: Ranges) -> list[tuple[int, int]]:
    kept = []
    for low, high in ranges:
        if low < _SURROGATES[0]:
            kept.append((low, min(high, _SURROGATES[0] - 1)))
        if high > _SURROGATES[1]:
            kept.append((max(low, _SURROGATES[1] + 1), high))
    return kept


def _listed(ranges: list[tuple[int, int]]) -> str | None:
    """The members of a class naming ``ranges``; None if one cannot be written."""
    parts = []
    for low, high in ranges:
        if low <= 0x7F <= high:
            return None
        for code in range(low, min(high, 0x1F) + 1):  # control characters, one by one
            if code not in _ESCAPES:
                return None
            parts.append(_ESCAPES[code])
        low = max(low, 0x20)
        if high < low:
            continue
        if high == low:
            parts.append(_member(low))
        elif high == low + 1:
            parts.append(_member(low) + _member(high))
        else:
            parts.append(f"{_member(low)}-{_member(high)}")
    return "".join(parts)


def _member(code: int) -> str:
    char = chr(code)
    return "\\" + char if char in _CLASS_SPECIAL else char
