"""The strings outside a pattern of one repeated class: exact, and served where asked for.

What a user sees: ``{"oneOf": [{"type": "string", "pattern": "^[A-Fa-f\\\\d]{24}$"},
{"type": "string"}]}`` (jsonschemabench o9963: an id that is not an object
id) is served, and a 24-hex string is refused.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import assert_served_and_enforced
from unit_tests.core.schema.test_schema_rewrite_equivalence import PROPERTIES, _ecma

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.schema.class_run_complement import run_complement

SHAPES = [
    "^[A-Fa-f\\d]{24}$",
    "^\\d+$",
    "^([a-c_])*$",
    "^(?:[^^b])?$",
    "^[ab]{2,5}$",
    "^x{3,}$",
    "^\\.*$",
    "^\\w{1}$",
    "^[^a-c]+$",
]


@pytest.mark.parametrize("pattern", SHAPES)
def test_the_complement_matches_exactly_the_strings_the_pattern_does_not(pattern: str) -> None:
    outside = run_complement(pattern)
    assert outside is not None
    # ASCII: ECMA-262's \w and \d are, Python's are not.
    original, complement = (re.compile(_ecma(p).pattern, re.ASCII) for p in (pattern, outside))

    @settings(PROPERTIES, max_examples=300)
    @given(st.text(alphabet="abcx_^.0F9-\n\u00e9\U0001f600", max_size=30))
    def check(text: str) -> None:
        assert bool(original.search(text)) != bool(complement.search(text)), text

    check()


@pytest.mark.parametrize(
    "pattern",
    [
        "^(ab)+$",  # two characters a repetition
        "^a",  # a prefix: not anchored at the end
        "[a-z]+$",
        "^[a-z]+",
        "^([a-z]+$",  # a group never closed
        "^[a-z]+?$",  # lazy
        "^[a-z]{300}$",  # past the repetitions read
        "^[a-z]{5,2}$",
        "^\\s+$",  # a class ecma_whitespace writes out first
        "^[]+$",
    ],
)
def test_other_shapes_have_no_complement_here(pattern: str) -> None:
    assert run_complement(pattern) is None


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (
            {"oneOf": [{"type": "string", "pattern": "^[a-f\\d]{4}$"}, {"type": "string"}]},
            '"abz0"',
            '"ab09"',
        ),
        ({"type": "string", "not": {"pattern": "^\\d+$"}}, '"1a"', '"12"'),
    ],
)
def test_a_string_outside_the_pattern_is_served_and_enforced(
    routed: RoutedEngine, schema: dict[str, Any], valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)
