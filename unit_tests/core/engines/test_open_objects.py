"""Open objects (the server's default): objects and tuples as open as their schema leaves them.

The opening is checked three ways: what it writes, that the schema the
engines compile accepts exactly what the client's schema accepts (jsonschema,
the oracle, on random schemas), and that both engines then take the
properties and items a schema does not list, and still nothing it forbids.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import COMPACT, EOS, VOCAB, SmallTokenizer, routed_accepts
from unit_tests.core.schema.test_schema_rewrite_equivalence import (
    _DEFINITION,
    PROPERTIES,
    _instances,
    _schemas,
    unevaluated_schemas,
    verdicts,
)

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.open_objects import objects_opened
from grammar_guard.core.schema.rewrite import rewritten_schema_text

OPEN = replace(COMPACT, open_objects=True)
ITEM = {"type": "integer"}


def test_objects_and_tuples_that_say_nothing_are_written_open() -> None:
    schema = {
        "type": "object",
        "properties": {"a": ITEM, "t": {"prefixItems": [ITEM]}},
        "$defs": {"p": {"patternProperties": {"^x": ITEM}}},
    }
    assert objects_opened(schema) == {
        "type": "object",
        "properties": {"a": ITEM, "t": {"prefixItems": [ITEM], "items": True}},
        "$defs": {"p": {"patternProperties": {"^x": ITEM}, "additionalProperties": True}},
        "additionalProperties": True,
    }


@pytest.mark.parametrize(
    "schema",
    [
        {"properties": {"a": ITEM}, "additionalProperties": False},
        {"properties": {"a": ITEM}, "additionalProperties": ITEM},
        {"prefixItems": [ITEM], "items": False},
        {"type": "object"},  # lists nothing: already any object, on both engines
        {"required": ["a"]},
        # true would evaluate every property, and unevaluatedProperties reads that.
        {"allOf": [{"properties": {"a": ITEM}}], "unevaluatedProperties": False},
        {"prefixItems": [{"prefixItems": [ITEM]}], "unevaluatedItems": False},
    ],
)
def test_what_a_schema_says_or_reads_stays_as_written(schema: dict[str, Any]) -> None:
    assert objects_opened(schema) is schema


def _compiled_schema(schema: Any, open_objects: bool) -> Any:
    """The schema both engines compile for ``schema``, rewritten, opened or not."""
    return json.loads(rewritten_schema_text(json.dumps(schema), open_objects))


def _check_random(schemas: st.SearchStrategy[Any], examples: int) -> Counter[str]:
    """Each drawn schema, opened, gives each drawn instance the verdict it gave before."""
    seen: Counter[str] = Counter()

    @settings(PROPERTIES, max_examples=examples)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        schema = {**data.draw(schemas, label="schema"), "$defs": _DEFINITION}
        instances = data.draw(_instances(schema), label="instances")
        # Against the schema rewritten without the opening: the rest of the
        # rewrite has its own equivalence tests.
        rewritten = _compiled_schema(schema, False)
        opened = _compiled_schema(schema, True)
        expected = verdicts(rewritten, instances)
        assert verdicts(opened, instances) == expected, json.dumps(opened)
        changed = opened != rewritten
        seen["opened" if changed else "as is"] += 1
        if changed and True in expected:
            seen["opened, some valid"] += 1

    check()
    return seen


def test_opened_schemas_accept_exactly_what_the_schema_accepts() -> None:
    seen = _check_random(_schemas(), 300)
    # The draws must reach the opening, with instances it must keep valid.
    assert seen["opened"] >= 30 and seen["opened, some valid"] >= 10, seen


def test_documents_reading_unevaluated_keywords_keep_their_verdicts() -> None:
    seen = _check_random(unevaluated_schemas(), 150)
    assert seen["as is"] + seen["opened"] == 150, seen


@pytest.mark.parametrize(
    ("schema", "extra"),
    [
        (
            {"anyOf": [{"properties": {"a": ITEM}}], "unevaluatedProperties": False},
            {"a": 1, "d": 2},
        ),
        ({"anyOf": [{"prefixItems": [ITEM]}], "unevaluatedItems": False}, [1, 2]),
    ],
)
def test_what_unevaluated_keywords_forbid_stays_forbidden(schema: Any, extra: Any) -> None:
    # Opened, the branch would evaluate the extra name or item, and the
    # unevaluated keyword would no longer see it.
    assert verdicts(schema, [extra]) == [False]
    assert verdicts(_compiled_schema(schema, True), [extra]) == [False]


def _accepts(engine: XGrammarEngine | LLGuidanceEngine, spec: GrammarSpec, text: str) -> bool:
    matcher = engine.new_matcher(engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    tokens = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in tokens) and matcher.is_terminated()


@pytest.mark.parametrize(
    ("schema", "unlisted", "forbidden"),
    [
        (
            {"type": "object", "properties": {"a": ITEM}, "required": ["a"]},
            ['{"a":1,"b":2}', '{"a":1,"b":"x"}'],
            ['{"a":"x"}', '{"a":1,"a":"x"}', '{"b":2}'],
        ),
        ({"type": "array", "prefixItems": [ITEM]}, ["[1,2]", '[1,"x"]'], ['["x"]', '["x",1]']),
    ],
)
def test_both_engines_take_what_an_open_schema_does_not_list_and_nothing_it_forbids(
    small: SmallTokenizer,
    small_llguidance: LLGuidanceEngine,
    schema: Any,
    unlisted: list[str],
    forbidden: list[str],
) -> None:
    for engine in (small.engine, small_llguidance):
        opened = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, OPEN)
        closed = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)
        for text in unlisted:
            assert _accepts(engine, opened, text), (engine, text)
            assert not _accepts(engine, closed, text), (engine, text)  # the default
        for text in forbidden:
            assert not _accepts(engine, opened, text), (engine, text)


def test_open_objects_in_compact_json_go_to_llguidance(routed: RoutedEngine) -> None:
    # xgrammar writes an unlisted member's value as any JSON value, with ", "
    # between members even in compact mode: {"b":[1,2]} would be refused.
    schema = {"type": "object", "properties": {"a": ITEM}, "required": ["a"]}
    opened = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, OPEN)
    assert route(opened).engine is EngineName.LLGUIDANCE
    assert route(GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)).engine is (
        EngineName.XGRAMMAR
    )
    assert routed_accepts(routed, opened, '{"a":1,"b":[1,2]}')


def test_a_listed_name_xgrammar_cannot_keep_out_of_the_open_rest_is_found() -> None:
    # xgrammar keeps listed names out of the additional properties byte by
    # byte, which lets a second "ü" through: closed, nothing else is allowed.
    schema = {"type": "object", "properties": {"ü": ITEM}}
    XGrammarEngine.check(GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT))
    with pytest.raises(UnenforcedKeywordError):
        XGrammarEngine.check(GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, OPEN))


def test_open_branches_told_apart_by_required_names_are_served_narrowed(
    routed: RoutedEngine,
) -> None:
    # Open, {"r":1,"l":2,"w":3} is valid for two branches, which the oneOf
    # refuses and neither engine can tell, and three branches are past what
    # is written exactly; closed, the branches exclude it.
    number = {"type": "number"}
    schema = {
        "type": "object",
        "oneOf": [
            {"properties": {"r": number}, "required": ["r"]},
            {"properties": {"l": number, "w": number}, "required": ["l", "w"]},
            {"properties": {"b": number, "h": number}, "required": ["b", "h"]},
        ],
    }
    opened = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, OPEN)
    assert route(opened).narrowed_text is not None
    for text in ('{"r":1}', '{"l":2,"w":3}', '{"l":2,"w":3,"x":4}'):
        assert routed_accepts(routed, opened, text), text
    # Valid for two branches; then valid, but holding a name another requires.
    for text in ('{"r":1,"l":2,"w":3}', '{"r":1,"w":3}'):
        assert not routed_accepts(routed, opened, text), text
