"""Control characters in a JSON schema's strings are served and enforced.

The test suite's ``const``/``enum`` "nul characters in strings" and its
"properties/required with escaped characters" name such strings; both of
vLLM's backends serve them exactly. A schema reaches an engine only as JSON
text, where they stay escaped. xgrammar refuses a pattern holding a NUL
(its regex reader takes C strings), so such a pattern goes to llguidance.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from unit_tests.conftest import (
    SmallTokenizer,
    assert_served_and_enforced,
    compact_json_spec,
    routed_accepts,
)

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.settings import EngineSelection

ESCAPED_NAMES = {
    "type": "object",
    "properties": {"a\nb": {"const": 1}, "a\fb": {"const": 2}, "a\x01b": {"const": 3}},
    "required": ["a\fb"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        ({"const": "a\x00b"}, '"a\\u0000b"', '"ab"'),
        ({"enum": ["a\x00b", "c"]}, '"a\\u0000b"', '"a"'),
        (ESCAPED_NAMES, '{"a\\nb":1,"a\\fb":2}', '{"a\\nb":1}'),
        (ESCAPED_NAMES, '{"a\\fb":2,"a\\u0001b":3}', '{"ab":2}'),
        ({"type": "string", "pattern": "^/[^\x00]+$"}, '"/ab"', '"/a\\u0000"'),
        ({"type": "string", "pattern": "\x00a"}, '"\\u0000a"', '"a"'),
    ],
)
def test_a_decoded_control_character_is_served_and_enforced(
    routed: RoutedEngine, schema: Any, valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


def test_the_canonical_text_holds_no_raw_control_character() -> None:
    schema = {"enum": ["\x00", "\x1f", "\x7f", "\t"]}
    text = compact_json_spec(schema).text
    assert not any(ord(char) < 0x20 or ord(char) == 0x7F for char in text)
    assert json.loads(text) == schema


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "\x00a"},
        {"type": "object", "patternProperties": {"^a\x00": {"type": "integer"}}},
    ],
)
def test_a_nul_in_a_pattern_goes_to_llguidance_as_xgrammar_refuses_it(schema: Any) -> None:
    spec = compact_json_spec(schema)
    assert route(spec).engine is EngineName.LLGUIDANCE
    with pytest.raises(InvalidGrammarError, match="must not contain null characters"):
        route(spec, selection=EngineSelection.XGRAMMAR)


def test_a_nul_elsewhere_stays_on_xgrammar() -> None:
    assert route(compact_json_spec({"const": "a\x00b"})).engine is EngineName.XGRAMMAR


@pytest.mark.parametrize(
    ("pattern", "escaped"),
    [("^[a\\n]$", '"\\n"'), ("^[a\\t]$", '"\\t"'), ("^[ -~]$", '"\\""'), ("^[ -~]$", '"\\\\"')],
)
def test_xgrammar_keeps_the_escaped_members_of_a_class_out_so_llguidance_serves_it(
    small: SmallTokenizer, routed: RoutedEngine, pattern: str, escaped: str
) -> None:
    # Why routing prefers llguidance for such a class (xgrammar_cost.py):
    # xgrammar admits its plain members only, llguidance all of them, escaped.
    spec = compact_json_spec({"type": "string", "pattern": pattern})
    assert small.matches(spec, '"a"') and not small.matches(spec, escaped)
    assert route(spec).engine is EngineName.LLGUIDANCE
    assert routed_accepts(routed, spec, escaped) and routed_accepts(routed, spec, '"a"')
