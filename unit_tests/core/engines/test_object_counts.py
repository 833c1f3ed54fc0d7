"""Property counts that say nothing more of a closed object: served by llguidance, exactly."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import compact_json_spec, routed_accepts

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.llguidance.object_counts import decide_object_counts
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import InvalidGrammarError

# A name bounded by a pattern and a length: xgrammar drops the length there,
# so only llguidance can serve the object it is in.
BOUNDED_NAME = {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}


def _closed(properties: dict[str, Any], **counts: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
        **counts,
    }


def test_a_count_of_every_listed_name_is_served_by_llguidance(routed: RoutedEngine) -> None:
    # Code generators write maxProperties as the number of listed properties.
    schema = _closed({"name": BOUNDED_NAME, "id": {"type": "integer"}}, maxProperties=2)
    spec = compact_json_spec(schema)
    assert route(spec).engine is EngineName.LLGUIDANCE
    assert routed_accepts(routed, spec, '{"name":"ab","id":1}')
    assert routed_accepts(routed, spec, "{}")
    assert not routed_accepts(routed, spec, '{"name":"abcd"}')


def test_a_minimum_of_every_listed_name_requires_them_all(
    small_llguidance: LLGuidanceEngine, routed: RoutedEngine
) -> None:
    spec = compact_json_spec(
        _closed({"name": BOUNDED_NAME, "id": {"type": "integer"}}, minProperties=2)
    )
    small_llguidance.check(spec)
    assert routed_accepts(routed, spec, '{"name":"ab","id":1}')
    assert not routed_accepts(routed, spec, '{"name":"ab"}')


def test_a_minimum_the_required_names_meet_says_nothing(small_llguidance: LLGuidanceEngine) -> None:
    open_object = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]}
    small_llguidance.check(compact_json_spec({**open_object, "minProperties": 1}))


@pytest.mark.parametrize(
    "schema",
    [
        _closed({"a": {}, "b": {}, "c": {}}, maxProperties=2),  # two of three names
        _closed({"a": {}, "b": {}, "c": {}}, minProperties=2),
        {"type": "object", "properties": {"a": {}}, "maxProperties": 1, "patternProperties": {}},
    ],
    ids=["max-below-listed", "min-between", "names-beyond-listed"],
)
def test_a_count_that_still_says_something_is_left_for_xgrammar(
    schema: dict[str, Any], small_llguidance: LLGuidanceEngine
) -> None:
    spec = compact_json_spec(schema)
    with pytest.raises(InvalidGrammarError, match="min/maxProperties"):
        small_llguidance.check(spec)
    assert route(spec).engine is EngineName.XGRAMMAR


# --- property test: the rewrite accepts exactly what the schema accepts --------------------

_NAMES = ["a", "b", "c", "d"]


@st.composite
def _object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    listed = draw(st.lists(st.sampled_from(_NAMES[:3]), min_size=1, unique=True))
    values = st.sampled_from([{}, {"type": "integer"}, False])
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: draw(values) for name in listed},
    }
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    if draw(st.booleans()):
        schema["patternProperties"] = {"^d$": {}}
    required = draw(st.lists(st.sampled_from([*listed, "d"]), max_size=2))
    if required:
        schema["required"] = required
    for keyword in ("minProperties", "maxProperties"):
        # Near the number of listed names, where the rewrite decides.
        offset = draw(st.one_of(st.none(), st.integers(min_value=-2, max_value=1)))
        if offset is not None:
            schema[keyword] = max(0, len(listed) + offset)
    return schema


def _instances(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects over the listed names and one more: every count, from none to all of them."""
    names = [*schema["properties"], "d"]
    return st.lists(st.sampled_from(names), unique=True).flatmap(
        lambda present: st.fixed_dictionaries({name: st.sampled_from([0, "x"]) for name in present})
    )


@settings(max_examples=1000, deadline=None)
@given(st.data())
def test_the_counts_decided_accept_exactly_what_the_schema_accepts(data: st.DataObject) -> None:
    schema = data.draw(_object_schemas())
    decided = copy.deepcopy(schema)
    decide_object_counts(decided)
    before, after = (
        jsonschema.Draft202012Validator(schema),
        jsonschema.Draft202012Validator(decided),
    )
    every_name = dict.fromkeys(schema["properties"], 0)  # the most names a closed object holds
    for instance in [every_name, *data.draw(st.lists(_instances(schema), max_size=8))]:
        assert before.is_valid(instance) == after.is_valid(instance), (decided, instance)
