"""Every string but some named ones, as a pattern: ``not`` of string values enforced.

Checked against Python's ``re`` (which reads this pattern as ECMA-262 does)
on random sets of strings full of characters patterns treat specially, and
on both engines, which must refuse every named string and take the others.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import COMPACT, assert_served_and_enforced
from unit_tests.core.schema.test_schema_rewrite_equivalence import assert_equivalent
from unit_tests.llguidance_acceptance import byte_llguidance, llguidance_accepts
from unit_tests.xgrammar_acceptance import accepted, compile_schema, serialisations

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.rewrite import rewrite_schema
from grammar_guard.core.schema.string_complement import (
    MAX_STRINGS,
    pattern_outside,
    strings_outside,
)

# Characters a pattern reads specially, inside a class or out, and some that are not.
_ALPHABET = 'ab^$.|?*+()[]{}\\-/é"\n'


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.text(_ALPHABET.replace("\n", ""), max_size=4), min_size=1, max_size=5),
    st.lists(st.text(_ALPHABET, max_size=5), min_size=10, max_size=30),
)
def test_the_pattern_matches_exactly_the_strings_not_named(
    named: list[str], others: list[str]
) -> None:
    pattern = pattern_outside(named)
    assert pattern is not None
    compiled = re.compile(pattern)
    for string in [*named, *others]:
        assert bool(compiled.search(string)) == (string not in named), (pattern, string)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.text(_ALPHABET.replace("\n", ""), max_size=4), min_size=1, max_size=5),
    st.integers(0, 10_000),
    st.sampled_from(("", "a", "|", ")", "(?:", "\\", "]")),
)
def test_the_named_strings_are_read_back_from_the_pattern_and_from_nothing_else(
    named: list[str], cut: int, inserted: str
) -> None:
    pattern = pattern_outside(named)
    assert pattern is not None
    assert strings_outside(pattern) == frozenset(named)
    # Any other text, here the pattern with something inserted, is another
    # regex: read only if it says the complement of its strings exactly.
    other = pattern[: cut % len(pattern)] + inserted + pattern[cut % len(pattern) :]
    read = strings_outside(other)
    assert read is None or pattern_outside(read) == other


def test_a_pattern_of_the_client_s_is_not_read_as_named_strings() -> None:
    assert strings_outside("^(?:a|b)$") is None
    assert strings_outside("^a") is None


def test_past_the_bounds_or_with_a_control_character_there_is_no_pattern() -> None:
    assert pattern_outside([str(n) for n in range(MAX_STRINGS + 1)]) is None
    assert pattern_outside(["a" * 33]) is None
    assert pattern_outside(["a\tb"]) is None


LEAGUE = {"type": "string", "not": {"enum": ["intramural", "a.b", ""]}}
# Github_easy o83707: a team's league, any but the intramural one.
TEAM = {"type": "object", "properties": {"league": {"type": "string", "not": {"const": "intra"}}}}
# An if on a string property's value: that value, or the other strings.
KIND = {
    "type": "object",
    "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["kind"],
    "if": {"properties": {"kind": {"const": "count"}}},
    "then": {"required": ["n"]},
    "else": {"properties": {"n": False}},
}
STRINGS: list[Any] = ["intramural", "a.b", "", "intra", "intramurals", "axb", "a", 'é"\\', 1]


@pytest.mark.parametrize("schema", [LEAGUE, TEAM, KIND])
def test_written_with_a_pattern_and_equivalent(schema: dict[str, Any]) -> None:
    rewritten = assert_equivalent(
        schema,
        [*STRINGS, *({"league": s} for s in STRINGS), {"kind": "count"}, {"kind": "c", "n": 1}],
    )
    assert "not" not in str(rewritten) and "if" not in rewritten
    assert "pattern" in str(rewritten)


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_both_engines_refuse_the_named_strings_and_take_the_others(engine: str) -> None:
    named = LEAGUE["not"]["enum"]
    if engine == "xgrammar":
        grammar = compile_schema(rewrite_schema(LEAGUE))

        def accepts(value: Any) -> bool:
            return accepted(grammar, value)
    else:
        compiled = byte_llguidance().compile(
            GrammarSpec.build(RequestKind.JSON_SCHEMA, LEAGUE, COMPACT)
        )

        def accepts(value: Any) -> bool:
            return any(llguidance_accepts(compiled, text) for text in serialisations(value))

    assert not any(accepts(value) for value in named)
    assert all(accepts(value) for value in ["intra", "intramurals", "axb", "a", "é", "]"])
    # xgrammar's character classes leave out a quote and a backslash, which
    # JSON escapes: stricter there, never looser.
    assert accepts('é"\\') is (engine == "llguidance")


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (TEAM, '{"league":"youth"}', '{"league":"intra"}'),
        (KIND, '{"kind":"count","n":1}', '{"kind":"count"}'),
        (KIND, '{"kind":"other"}', '{"kind":"other","n":1}'),
    ],
)
def test_refused_before_now_served_and_enforced(
    routed: RoutedEngine, schema: dict[str, Any], valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)
