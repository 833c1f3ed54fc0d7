"""Where objects are closed for llguidance: never against a name the schema names."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_guard.core.engines.llguidance.closed_objects import closed_like_xgrammar

LISTED = {"properties": {"a": {"type": "integer"}}}
KIND = {"properties": {"kind": {"const": "k"}}, "required": ["kind"]}
WIN = {"properties": {"win": {}}, "required": ["win"]}
LOSE = {"properties": {"lose": {}}, "required": ["lose"]}


@pytest.mark.parametrize(
    ("schema", "closed"),
    [
        # an object closes over its own names, and over those it requires
        (
            {**LISTED, "required": ["b"]},
            {
                "properties": {"a": {"type": "integer"}, "b": {}},
                "required": ["b"],
                "additionalProperties": False,
            },
        ),
        # and over the names its oneOf and anyOf branches list or require, which stay open
        (
            {**LISTED, "oneOf": [KIND], "anyOf": [{"required": ["c"]}, True]},
            {
                "properties": {"a": {"type": "integer"}, "kind": {}, "c": {}},
                "oneOf": [KIND],
                "anyOf": [{"required": ["c"]}, True],
                "additionalProperties": False,
            },
        ),
        # a branch that may bring names no list holds leaves the object and its branches open
        ({**LISTED, "anyOf": [{"$ref": "#/$defs/x"}, KIND]}, None),
        ({**LISTED, "anyOf": [{"patternProperties": {"^x": {}}}]}, None),
        ({**LISTED, "oneOf": [{"anyOf": [KIND]}]}, None),
        ({**LISTED, "additionalProperties": True, "anyOf": [KIND]}, None),
        # branches next to names or values of the object's own are not closed on their own
        ({"required": ["b"], "anyOf": [KIND]}, None),
        ({"enum": [{"b": 1}], "anyOf": [{"properties": {"c": False}}]}, None),
        # and neither are the branches of an allOf's member
        ({"allOf": [{"anyOf": [KIND]}, LISTED]}, None),
        # nothing below a oneOf, a not or an if is narrowed, nor what a $ref there names,
        ({"type": "object", "oneOf": [LISTED, KIND]}, None),
        # but where each closed oneOf branch lacks a name every other one requires
        (
            {"required": ["id"], "oneOf": [WIN, LOSE]},
            {
                "required": ["id"],
                "oneOf": [
                    {**WIN, "properties": {"win": {}, "id": {}}, "additionalProperties": False},
                    {**LOSE, "properties": {"lose": {}, "id": {}}, "additionalProperties": False},
                ],
            },
        ),
        ({"required": ["id"], "oneOf": [WIN, {**LOSE, "required": ["id"]}]}, None),
        (
            {"properties": {"x": {"not": LISTED}}},
            {"properties": {"x": {"not": LISTED}}, "additionalProperties": False},
        ),
        ({"$defs": {"listed": LISTED}, "oneOf": [{"$ref": "#/$defs/listed"}, KIND]}, None),
        # branches of an object that names nothing itself close as before
        (
            {"type": "object", "anyOf": [KIND]},
            {"type": "object", "anyOf": [{**KIND, "additionalProperties": False}]},
        ),
    ],
)
def test_objects_close_over_every_name_the_schema_names(
    schema: dict[str, Any], closed: dict[str, Any] | None
) -> None:
    assert closed_like_xgrammar(schema) == (schema if closed is None else closed)


# --- closing only narrows: a property test against jsonschema ---------------------------

_NAMES = ("a", "b", "c")
_LEAVES = st.sampled_from(({}, {"type": "integer"}, {"type": "string"}, {"const": 1}, False))
_DEFINED = {"$ref": "#/$defs/defined"}


@st.composite
def _objects(draw: st.DrawFn, depth: int = 2, refer: bool = True) -> dict[str, Any]:
    """Object schemas with the keywords closing reads, often inside combinators.

    ``refer``: some parts are a ``$ref`` to the document's one definition.
    """
    schema: dict[str, Any] = {}
    if draw(st.integers(0, 2)):
        values = _LEAVES | _objects(depth - 1, refer) if depth else _LEAVES
        names = st.sampled_from(_NAMES)
        schema["properties"] = draw(st.dictionaries(names, values, max_size=2))
    if draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=2))
    if draw(st.integers(0, 3)) == 0:
        schema["type"] = "object"
    if draw(st.integers(0, 4)) == 0:
        schema["additionalProperties"] = draw(st.booleans())
    if depth and draw(st.booleans()):
        keyword = draw(st.sampled_from(("oneOf", "anyOf", "allOf", "not", "if")))
        parts = _objects(depth - 1, refer)
        parts = st.one_of(parts, st.just(_DEFINED)) if refer else parts
        if keyword in ("not", "if"):
            schema[keyword] = draw(parts)
            if keyword == "if":
                schema["then"] = draw(_objects(depth - 1, refer))
        else:
            schema[keyword] = draw(st.lists(parts, min_size=1, max_size=3))
    return schema


@st.composite
def _combined(draw: st.DrawFn) -> dict[str, Any]:
    """A combinator over object schemas, beside few keywords of its own: where closing is subtle."""
    keyword = draw(st.sampled_from(("oneOf", "oneOf", "anyOf", "allOf", "not", "if")))
    parts = st.one_of(_objects(0), _objects(0), _objects(1), st.just(_DEFINED))
    schema = draw(_objects(0)) if draw(st.integers(0, 2)) == 0 else {}
    if keyword in ("not", "if"):
        schema[keyword] = draw(parts)
        if keyword == "if":
            schema["then"] = draw(_objects(1))
    else:
        schema[keyword] = draw(st.lists(parts, min_size=2, max_size=3))
    return schema


_INSTANCES = st.lists(
    st.dictionaries(st.sampled_from(_NAMES), st.sampled_from((1, "x")), max_size=2)
    | st.dictionaries(st.sampled_from((*_NAMES, "d")), st.sampled_from((1, None)), max_size=3)
    | st.sampled_from((1, "x", [])),
    min_size=8,
    max_size=16,
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_combined() | _objects(), _objects(depth=1, refer=False), _INSTANCES)
def test_closing_never_lets_in_a_value_the_schema_refuses(
    schema: dict[str, Any], defined: dict[str, Any], instances: list[Any]
) -> None:
    document = {**schema, "$defs": {"defined": defined}}
    original = jsonschema.Draft202012Validator(document)
    closed = jsonschema.Draft202012Validator(closed_like_xgrammar(document))
    for instance in instances:
        if closed.is_valid(instance):
            assert original.is_valid(instance), instance
