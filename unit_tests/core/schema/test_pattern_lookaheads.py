"""Leading lookaheads written out as the condition they are (pattern_lookaheads.py).

On random anchored patterns with lookaheads over a small alphabet, the
pattern written without them matches exactly the strings the original does,
as Python's ``re`` (which reads lookaheads, with ECMA-262's ``$``) decides;
what a user sees: such patterns are served and enforced, and the others are
still refused.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import assert_served_and_enforced, compact_json_spec
from unit_tests.core.schema.test_schema_rewrite_equivalence import (
    PROPERTIES,
    _ecma,
    assert_equivalent,
)

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.schema.pattern_lookaheads import lookaheads_written
from grammar_guard.core.schema.pattern_match import pattern_matches

_PIECES = ("a", "b", "[ab]", "[^a]", ".", "(?:a|bb)", "a*", "b+", "a?", ".*", "$")
_STRINGS = ["".join(chars) for size in range(5) for chars in itertools.product("ab-", repeat=size)]
_PARTS = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3).map("".join)


@st.composite
def lookahead_patterns(draw: st.DrawFn) -> str:
    """``^``, one or two lookaheads, and a rest."""
    aheads = draw(st.lists(st.tuples(st.sampled_from("=!"), _PARTS), min_size=1, max_size=2))
    rest = draw(_PARTS | st.just(""))
    return "^" + "".join(f"(?{sign}{body})" for sign, body in aheads) + rest


def test_lookaheads_written_out_match_exactly_what_the_pattern_matches() -> None:
    written = 0

    @settings(PROPERTIES, max_examples=300)
    @given(lookahead_patterns())
    def check(pattern: str) -> None:
        nonlocal written
        without = lookaheads_written(pattern)
        if without is None:
            return
        written += 1
        oracle = re.compile(_ecma(pattern).pattern, re.ASCII)
        for text in _STRINGS:
            assert pattern_matches(without, text) is bool(oracle.search(text)), (
                pattern,
                without,
                text,
            )

    check()
    # Not vacuous: most are written (a condition no string meets has no pattern).
    assert written >= 150, written


NAME = {"type": "string", "pattern": "^(?!.*\\.\\.)[a-z.]+$"}  # no two dots in a row
SLUG = {"type": "string", "pattern": "^(?![0-9])[a-z0-9-]+$"}  # not starting with a digit
KEYS = {"type": "object", "patternProperties": {"^(?!x-)[a-z-]+$": {"type": "integer"}}}


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (NAME, '"a.b"', '"a..b"'),
        (SLUG, '"a1-b"', '"1a"'),
        (KEYS, '{"ab":1}', '{"ab":"1"}'),
    ],
)
def test_a_pattern_with_leading_lookaheads_is_served_and_enforced(
    routed: RoutedEngine, schema: Any, valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


def test_schemas_with_lookaheads_written_out_accept_what_the_oracle_accepts() -> None:
    for schema in (NAME, SLUG, KEYS):
        assert_equivalent(schema, ["a.b", "a..b", "1a", "a1", "", {"ab": 1}, {"x-a": "s"}, 2])


@pytest.mark.parametrize(
    "pattern",
    [
        "^(?=a)b|c",  # the lookahead is on one alternative only
        "(?=a)ab",  # not anchored: a condition at any position
        "^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9]).{8,}$",  # more states than written
        "^(?=(?<=a)b)",  # a lookbehind inside
    ],
)
def test_other_lookarounds_stay_refused(pattern: str) -> None:
    assert lookaheads_written(pattern) is None
    with pytest.raises(UnenforcedKeywordError, match="pattern"):
        route(compact_json_spec({"type": "string", "pattern": pattern}))
