"""Whether two patterns share a string, decided on their automata (pattern_overlap.py).

An answer of "no string" lets the rewrite serve a ``oneOf`` as ``anyOf``, so
it must never be wrong: on random patterns over a small alphabet, every
string up to four characters that both match (by :mod:`pattern_match`) must
make the answer "some string". The cases below pin the search semantics
(a pattern matches anywhere unless anchored) and the anchors.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.core.schema.test_schema_rewrite_equivalence import PROPERTIES

from grammar_guard.core.schema.formats import format_pattern
from grammar_guard.core.schema.pattern_match import pattern_matches
from grammar_guard.core.schema.pattern_overlap import patterns_overlap

WORK = 100_000


@pytest.mark.parametrize(
    ("first", "second", "shared"),
    [
        ("^[0-9]+$", "^[0-9]+px$", False),
        ("^[0-9]+$", "^[0-9]+(?:px)?$", True),
        ("a", "b", True),  # "ab": each is searched for
        ("^a", "b$", True),
        ("^ab", "^a", True),
        ("abc$", "^xabc", True),
        ("^a$", "^b$", False),
        ("^.$", "^\\n$", False),  # "." is no line terminator
        ("^[^a]$", "^a$", False),
        ("^[^a]$", "^[ab]$", True),
        ("^x+$", "^x{3}y$", False),
        ("^$", "^(?:)$", True),
        ("^a$b", "b", False),  # nothing follows the end
        ("a^", "a", False),  # nothing comes before the start
        # Formats once written as patterns: the oneOfs real schemas write.
        (format_pattern("ipv4"), format_pattern("ipv6"), False),
        (format_pattern("date"), format_pattern("date-time"), False),
        (format_pattern("ipv4"), format_pattern("hostname"), True),  # "1.2.3.4" is both
    ],
)
def test_patterns_share_a_string_or_not(first: str, second: str, shared: bool) -> None:
    assert patterns_overlap(first, second, WORK).found is shared
    assert patterns_overlap(second, first, WORK).found is shared


def test_what_the_matcher_does_not_read_or_the_bound_cuts_is_left_undecided() -> None:
    assert patterns_overlap("(?=a)a", "a", WORK).found is None
    # Patterns no other test compares: an answer is remembered for the next comparison.
    first, second = "^q[0-9]+(?:r|s)$", "^q[0-9]+t$"
    cut = patterns_overlap(first, second, 3)
    assert cut.found is None and cut.work > 3
    assert patterns_overlap(first, second, 2) == (None, 0)  # no more work where less was given
    assert patterns_overlap(first, second, WORK).found is False
    assert patterns_overlap(first, second, 3) == (False, 0)


_PIECES = ("a", "b", "[ab]", "[^a]", ".", "(?:a|bb)", "a*", "b+", "a?", "[ab]{2}", "^", "$")
_STRINGS = ["".join(chars) for size in range(5) for chars in itertools.product("abc", repeat=size)]
_PATTERNS = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map("".join) | st.builds(
    "{}|{}".format, st.sampled_from(_PIECES), st.sampled_from(_PIECES)
)


def test_no_string_is_claimed_absent_that_both_patterns_match() -> None:
    seen = {True: 0, False: 0}

    @settings(PROPERTIES, max_examples=400)
    @given(_PATTERNS, _PATTERNS)
    def check(first: str, second: str) -> None:
        found = patterns_overlap(first, second, WORK).found
        assert found is not None
        both = next(
            (s for s in _STRINGS if pattern_matches(first, s) and pattern_matches(second, s)),
            None,
        )
        assert both is None or found, (first, second, both)
        seen[found] += 1

    check()
    # Not vacuous: both answers are given.
    assert min(seen.values()) >= 40, seen
