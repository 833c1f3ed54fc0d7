"""The strings a pattern misses, written as a pattern (pattern_complement.py).

A ``not`` of a pattern is served by the complement this writes, so the
complement must be exact: on random patterns over a small alphabet, every
string up to four characters matches exactly one of the pattern and its
complement (both read by :mod:`pattern_match`), and a schema with such a
``not`` accepts what the oracle accepts. Patterns past the bounds, or with
what the matcher does not read, get no complement and stay refused.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import assert_served_and_enforced, compact_json_spec
from unit_tests.core.schema.test_schema_rewrite_equivalence import PROPERTIES, assert_equivalent

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.schema.pattern_complement import MAX_STATES, automaton_complement
from grammar_guard.core.schema.pattern_match import pattern_matches

_PIECES = ("a", "b", "[ab]", "[^a]", ".", "(?:a|bb)", "a*", "b+", "a?", "[a-]{2}", "\\n", "^", "$")
_ALPHABET = "ab-\n\u00e9"
_STRINGS = [
    "".join(chars) for size in range(5) for chars in itertools.product(_ALPHABET, repeat=size)
]
PATTERNS = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4).map("".join) | st.builds(
    "{}|{}".format, st.sampled_from(_PIECES), st.sampled_from(_PIECES)
)


def test_the_complement_matches_exactly_the_strings_the_pattern_misses() -> None:
    written = 0

    @settings(PROPERTIES, max_examples=300)
    @given(PATTERNS)
    def check(pattern: str) -> None:
        nonlocal written
        outside = automaton_complement(pattern)
        if outside is None:
            return
        written += 1
        for text in _STRINGS:
            assert pattern_matches(outside, text) is (not pattern_matches(pattern, text)), (
                pattern,
                outside,
                text,
            )

    check()
    # Not vacuous: most such patterns have one (those matching every string have none).
    assert written >= 200, written


def test_a_schema_negating_a_pattern_accepts_what_the_oracle_accepts() -> None:
    instances = st.lists(
        st.sampled_from(_STRINGS) | st.sampled_from((None, 1, [], {})), max_size=12
    )

    @settings(PROPERTIES, max_examples=150)
    @given(PATTERNS, st.sampled_from(({}, {"type": "string"}, {"maxLength": 2})), instances)
    def check(pattern: str, beside: dict[str, Any], values: list[Any]) -> None:
        assert_equivalent({**beside, "not": {"pattern": pattern}}, values)

    check()


@pytest.mark.parametrize(
    "pattern",
    [
        "(?=a)b",  # not read by the matcher
        f"^(?:ab){{{MAX_STATES}}}$",  # more states than written
        "^\x01$",  # a class that would list a raw control character
    ],
)
def test_no_complement_is_written_past_what_is_read_or_bounded(pattern: str) -> None:
    assert automaton_complement(pattern) is None


PREFIXED = {"type": "string", "not": {"pattern": "^x-"}}
# Strings starting with "x-" pass both branches: the others, and any other value, one.
EITHER = {"oneOf": [{"type": "string"}, {"pattern": "^x-"}]}
NO_DIGIT = {"type": "object", "properties": {"id": {"type": "string", "not": {"pattern": "[0-9]"}}}}


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (PREFIXED, '"ab"', '"x-a"'),
        (PREFIXED, '"x_"', '"x-"'),
        (PREFIXED, '""', "1"),
        (NO_DIGIT, '{"id":"ab"}', '{"id":"a1"}'),
        (EITHER, '"x_"', '"x-"'),
        (EITHER, "1", '"x-1"'),
    ],
)
def test_a_negated_pattern_is_served_and_enforced(
    routed: RoutedEngine, schema: Any, valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


def test_a_one_of_beside_a_pattern_is_written_out_with_its_complement() -> None:
    rewritten = assert_equivalent(EITHER, ["x-", "x", "", 1, None, ["x-"]])
    assert "oneOf" not in rewritten


def test_a_negated_pattern_without_a_complement_stays_refused() -> None:
    with pytest.raises(UnenforcedKeywordError, match="not"):
        route(
            compact_json_spec({"type": "string", "not": {"pattern": f"^(?:ab){{{MAX_STATES}}}$"}})
        )
