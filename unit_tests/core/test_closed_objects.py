"""Where objects are closed for llguidance: never against a name the schema names."""

from __future__ import annotations

from typing import Any

import pytest

from grammar_guard.core.closed_objects import closed_like_xgrammar

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
