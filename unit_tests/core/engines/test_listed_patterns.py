"""Pattern properties that can only name listed properties: no dead end on llguidance."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from unit_tests.conftest import COMPACT, EOS, VOCAB

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.base import TokenMatcher
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.llguidance.listed_patterns import fold_listed_patterns, listed_names
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.demo.cases import LISTED_PATTERN_SCHEMA

NAMES = frozenset({"a", "b", "line1", "line2", "line3", "x.y"})


def _closed_object(patterns: dict[str, Any], *names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "integer"} for name in names},
        "patternProperties": patterns,
        "additionalProperties": False,
    }


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


def _fed(engine: RoutedEngine | LLGuidanceEngine, schema: Any, text: str) -> TokenMatcher:
    spec = _json(schema)
    matcher = engine.new_matcher(engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    assert all(matcher.accept_token(VOCAB.index(char)) for char in text), text
    return matcher


def _allows(matcher: TokenMatcher, token: str) -> bool:
    bitmask = allocate_bitmask(1, len(VOCAB))
    matcher.fill_bitmask(bitmask, 0)
    token_id = VOCAB.index(token)
    return bool(int(bitmask[0, token_id // 32]) >> (token_id % 32) & 1)


def _ends(matcher: TokenMatcher) -> bool:
    return matcher.accept_token(VOCAB.index(EOS)) and matcher.is_terminated()


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("^a$", {"a"}),
        ("^(a|b)$", {"a", "b"}),
        ("^(?:a|b)?$", None),  # also the empty name, which is not listed
        ("^line[1-3]$", {"line1", "line2", "line3"}),
        ("^line[1-4]$", None),  # line4 is not listed
        ("^x\\.y$", {"x.y"}),
        ("^x.y$", None),  # any character between
        ("^a", None),  # searched: every name starting with "a"
        ("a$", None),
        ("^a|b$", None),  # each anchor binds to one side
        ("^a*$", None),
        ("^\\w$", None),
        ("^[^a]$", None),
        ("^(?=a)a$", None),
        ("^b{1}$", {"b"}),
        ("^b{1000000000}$", None),  # longer than any name, given up on at once
    ],
)
def test_a_pattern_lists_its_names_only_when_all_of_them_are_declared(
    pattern: str, names: set[str] | None
) -> None:
    expected = None if names is None else frozenset(names)
    assert listed_names(pattern, NAMES) == expected


def test_the_vllm_schema_ends_after_its_last_property(routed: RoutedEngine) -> None:
    assert routed.plan(_json(LISTED_PATTERN_SCHEMA)).engine is EngineName.LLGUIDANCE
    matcher = _fed(routed, LISTED_PATTERN_SCHEMA, '{"score":5,"tags":[]')
    assert not _allows(matcher, ",")
    assert matcher.accept_token(VOCAB.index("}")) and _ends(matcher)


@pytest.mark.parametrize("pattern", ["^a$", "^(a|b)$", "^[ab]$"])
def test_no_property_separator_leads_nowhere(
    small_llguidance: LLGuidanceEngine, pattern: str
) -> None:
    matcher = _fed(small_llguidance, _closed_object({pattern: {}}, "a", "b"), '{"a":1,"b":2')
    assert not _allows(matcher, ",")


def test_a_folded_pattern_still_constrains_the_property_it_names(
    small_llguidance: LLGuidanceEngine,
) -> None:
    schema = _closed_object({"^a$": {"minimum": 10}}, "a")
    assert not _allows(_fed(small_llguidance, schema, '{"a":5'), "}")
    finished = _fed(small_llguidance, schema, '{"a":15}')
    assert _ends(finished)


def test_a_pattern_that_names_other_keys_keeps_them(small_llguidance: LLGuidanceEngine) -> None:
    matcher = _fed(small_llguidance, _closed_object({"^(a|c)$": {}}, "a"), '{"a":1,"c":2}')
    assert _ends(matcher)


def test_a_false_pattern_entry_still_forbids_what_it_names(
    small_llguidance: LLGuidanceEngine,
) -> None:
    schema = _closed_object({"^a$": {}, "^b$": False}, "a", "b")
    matcher = _fed(small_llguidance, schema, '{"a":1')
    assert not _allows(matcher, ",")  # b is listed, but its pattern forbids it
    assert matcher.accept_token(VOCAB.index("}")) and _ends(matcher)


def test_the_rewrite_does_not_reach_into_values() -> None:
    # An enum member shaped like such an object is a value: a client gets it as written.
    member = _closed_object({"^a$": {}}, "a")
    schema = {"type": "object", "properties": {"v": {"enum": [member]}}, "required": ["v"]}
    rewritten = copy.deepcopy(schema)
    fold_listed_patterns(rewritten)
    assert rewritten == schema
