"""``oneOf``, ``not`` and ``if``/``then``/``else`` written as an ``anyOf`` of plain branches.

What the rewrite writes for each form, what it leaves as written, and the
engines serving the result. That every rewrite accepts exactly what the
schema accepts, on random schemas and on the repository's data, is in
``test_schema_rewrite_equivalence.py``; each case here is checked the same
way on its own instances.
"""

from __future__ import annotations

from typing import Any

import pytest
from unit_tests.conftest import compact_json_spec, routed_accepts
from unit_tests.core.schema.test_schema_rewrite_equivalence import NO_COMPLEMENT, assert_equivalent

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.engines.xgrammar.rewrite import absent_properties_unlisted
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.rewrite import rewrite_schema

NOT_NUMBER = ["null", "boolean", "object", "array", "string"]
NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}

# (id, schema, what the rewrite writes)
REWRITTEN: list[tuple[str, Any, Any]] = [
    (
        "a oneOf of required names: each branch lacks a name the other requires",
        {"type": "object", "oneOf": [{"required": ["a", "b"]}, {"required": ["a", "c"]}]},
        {
            "anyOf": [
                {"type": "object", "required": ["a", "b"], "properties": {"c": False}},
                {"type": "object", "required": ["a", "c"], "properties": {"b": False}},
            ]
        },
    ),
    (
        "the rest of the node is merged into each branch",
        {**NUMBERS, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": False},
                    "required": ["a"],
                },
                {
                    "type": "object",
                    "properties": {"a": False, "b": {"type": "number"}},
                    "required": ["b"],
                },
            ]
        },
    ),
    (
        "not of required names: an object lacking one of them",
        {"not": {"required": ["a", "b"]}},
        {
            "anyOf": [
                {"type": "object", "properties": {"a": False}},
                {"type": "object", "properties": {"b": False}},
            ]
        },
    ),
    (
        "if/then/else of bounds: the condition, or its complement, with its branch",
        {"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"multipleOf": 2}},
        {
            "anyOf": [
                {
                    "anyOf": [
                        {"type": "number", "exclusiveMaximum": 0, "minimum": -10},
                        {"type": NOT_NUMBER},
                    ]
                },
                {"type": "number", "minimum": 0, "multipleOf": 2},
            ]
        },
    ),
    (
        "if and then without else: the condition's complement alone is the second branch",
        {"type": "string", "if": {"maxLength": 3}, "then": {"minLength": 2}},
        {
            "anyOf": [
                {"type": "string", "maxLength": 3, "minLength": 2},
                {"type": "string", "minLength": 4},
            ]
        },
    ),
    (
        "a not inside a branch, as the Glaive area schemas write one of two shapes",
        {
            "type": "object",
            "oneOf": [
                {"required": ["length", "width"], "not": {"required": ["radius"]}},
                {"required": ["radius"], "not": {"required": ["length", "width"]}},
            ],
        },
        {
            "anyOf": [
                {
                    "type": "object",
                    "required": ["length", "width"],
                    "properties": {"radius": False},
                },
                {"type": "object", "required": ["radius"], "properties": {"length": False}},
                {"type": "object", "required": ["radius"], "properties": {"width": False}},
            ]
        },
    ),
    (
        "a type negated: the other types",
        {"oneOf": [{"type": "string"}, {"type": ["string", "null"]}]},
        {"type": "null"},
    ),
    (
        "no value left: false",
        {"oneOf": [True, True]},
        False,
    ),
    (
        "a branch whose bounds leave no number keeps the other types",
        {"minimum": 5, "oneOf": [{"maximum": 4}, {"type": "null"}]},
        {"type": ["boolean", "object", "array", "string"]},
    ),
    (
        "an anyOf beside keywords that constrain: each branch gets them (xgrammar reads it alone)",
        {
            **NUMBERS,
            "required": ["a"],
            "anyOf": [{"properties": {"b": {"minimum": 1}}}, {"required": ["b"]}],
        },
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number", "minimum": 1}},
                    "required": ["a"],
                },
                {**NUMBERS, "required": ["a", "b"]},
            ]
        },
    ),
    (
        "a branch of another type than the node's is no value: left out",
        {"type": "string", "pattern": "^[0-9]*$", "anyOf": [{"type": "null"}, {"maxLength": 0}]},
        {"type": "string", "pattern": "^[0-9]*$", "maxLength": 0},
    ),
    (
        "annotations and definitions stay beside the anyOf",
        {
            "title": "t",
            "$defs": {"n": {"type": "integer"}},
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/n"}},
            "not": {"required": ["a", "b"]},
        },
        {
            "title": "t",
            "$defs": {"n": {"type": "integer"}},
            "anyOf": [
                {"type": "object", "properties": {"a": False}},
                {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/n"}, "b": False},
                },
            ],
        },
    ),
]

# As NousResearch json-mode-eval 37 writes it: a member flag decides what else must hold.
FLAGGED = {
    "type": "object",
    "properties": {"a": {"type": "boolean"}, "b": {"type": "integer"}},
    "required": ["a"],
    "if": {"properties": {"a": {"const": True}}},
    "then": {"required": ["b"]},
    "else": {"properties": {"b": {"maximum": 0}}},
}
REWRITTEN.append(
    (
        "an if naming a property's values: those values, or the values the node leaves",
        FLAGGED,
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "a": {"type": "boolean", "const": True},
                        "b": {"type": "integer"},
                    },
                    "required": ["a", "b"],
                },
                {
                    "type": "object",
                    "properties": {
                        "a": {"type": "boolean", "enum": [False]},
                        "b": {"type": "integer", "maximum": 0},
                    },
                    "required": ["a"],
                },
            ]
        },
    )
)

REWRITTEN.append(
    (
        "a property of some types negated: an object with it, of the other types",
        {"not": {"properties": {"a": {"type": "string"}}}},
        {
            "type": "object",
            "required": ["a"],
            "properties": {"a": {"type": ["null", "boolean", "object", "array", "number"]}},
        },
    )
)

REWRITTEN.append(
    (
        "a oneOf naming one property's values: each value that exactly one branch names",
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "oneOf": [
                {"properties": {"a": {"const": "x"}}},
                {"properties": {"a": {"const": "y"}}},
                {"properties": {"a": {"enum": ["y", "z"]}}},
            ],
        },
        {
            "anyOf": [
                {"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a"]},
                {"type": "object", "properties": {"a": {"enum": ["z"]}}, "required": ["a"]},
            ]
        },
    )
)

# (id, schema): left exactly as written, each for the reason its id gives.
KEPT: list[tuple[str, Any]] = [
    ("a pattern negated: no complement written", {"not": {"pattern": NO_COMPLEMENT}}),
    (
        "integer negated: the numbers that are not integers have no type name",
        {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
    ),
    (
        "a property schema negated that is more than types or named values",
        {"not": {"properties": {"a": {"type": "string", "minLength": 2}}}},
    ),
    (
        "an enum beside a pattern not decided, which xgrammar reads alone",
        {"enum": ["a", "b"], "not": {"pattern": "(?=a)"}},
    ),
    ("a reference beside", {"$defs": {"n": {}}, "$ref": "#/$defs/n", "not": {"minimum": 2}}),
    ("a malformed type", {"type": "integr", "not": {"minimum": 2}}),
    ("an anyOf alone is what the engines read", {"anyOf": [{"required": ["a"]}, {"minimum": 2}]}),
    (
        "more branches than the bound",
        {"oneOf": [{"required": [name, name.upper()]} for name in "abcde"]},
    ),
    (
        "an array among the values a condition names has no complement here",
        {"if": {"enum": [[1], 2]}, "then": {"required": ["b"]}},
    ),
    (
        "properties read with additionalProperties cannot be negated apart",
        {"not": {"properties": {"a": False}, "additionalProperties": False}},
    ),
]

# Values of every type, objects with each combination of names, numbers around the bounds.
INSTANCES: list[Any] = [
    None,
    True,
    "",
    "abcd",
    "ab",
    [],
    [1],
    -11,
    -10,
    -1,
    0,
    1.5,
    2,
    3,
    4,
    5,
    6,
    {},
    {"a": 1},
    {"b": 2},
    {"a": 1, "b": 2},
    {"a": 1, "c": 3},
    {"a": "x", "b": 2},
    {"a": 1, "b": 2, "c": 3},
    {"radius": 1},
    {"length": 1, "width": 2},
    {"length": 1, "width": 2, "radius": 3},
    {"length": 1, "radius": 3},
    {"a": True},
    {"a": True, "b": 1},
    {"a": False, "b": 1},
    {"a": False, "b": -1},
    {"a": "x"},
    {"a": "x", "b": 1},
    {"a": "y"},
    {"a": "z"},
    {"a": "w"},
]


@pytest.mark.parametrize(
    ("schema", "expected"), [r[1:] for r in REWRITTEN], ids=[r[0] for r in REWRITTEN]
)
def test_each_form_is_written_as_its_branches(schema: Any, expected: Any) -> None:
    assert assert_equivalent(schema, INSTANCES) == expected


@pytest.mark.parametrize("schema", [k[1] for k in KEPT], ids=[k[0] for k in KEPT])
def test_what_no_exact_rewrite_exists_for_is_left_as_written(schema: Any) -> None:
    # Kept at the top; what it holds may still be rewritten (an untyped bound split by type).
    rewritten = assert_equivalent(schema, INSTANCES)
    assert isinstance(rewritten, dict)
    combinators = {"oneOf", "not", "if", "anyOf"}
    assert rewritten.keys() & combinators == schema.keys() & combinators


def test_request_sized_combinators_are_read_within_bounds() -> None:
    # Each oneOf branch is read once per other branch, and each literal joins
    # every term: without bounds a 2,000-branch oneOf took longer than a
    # request waits. Past them the node is kept (and refused) as written.
    many_branches = {"type": "object", "oneOf": [{"required": [f"n{i}"]} for i in range(2000)]}
    assert rewrite_schema(many_branches)["oneOf"] == many_branches["oneOf"]
    many_names = {"not": {"type": "object", "required": [f"n{i}" for i in range(20000)]}}
    assert "not" in rewrite_schema(many_names)
    long_any_of = {"minProperties": 1, "anyOf": [{"required": [f"n{i}"]} for i in range(5000)]}
    assert rewrite_schema(long_any_of)["anyOf"] == long_any_of["anyOf"]


# --- the engines serve what they refused before ------------------------------------------

# As the Glaive "calculate_area" schemas write it: the dimensions of one shape.
DIMENSIONS = {
    "type": "object",
    "properties": {
        "shape": {"enum": ["circle", "rectangle"]},
        "dimensions": {
            "type": "object",
            "properties": {
                "radius": {"type": "number"},
                "length": {"type": "number"},
                "width": {"type": "number"},
            },
            "oneOf": [{"required": ["radius"]}, {"required": ["length", "width"]}],
        },
    },
    "required": ["shape", "dimensions"],
}
# As the test suite's if-then-else.json writes it.
CONDITION = {
    "type": "object",
    "properties": {
        "n": {"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"multipleOf": 2}}
    },
    "required": ["n"],
}


@pytest.mark.parametrize(
    ("schema", "refused_for", "engine", "valid", "invalid"),
    [
        # The absent names are left unlisted for xgrammar's closed objects.
        (
            DIMENSIONS,
            "oneOf",
            EngineName.XGRAMMAR,
            '{"shape":"circle","dimensions":{"radius":1}}',
            '{"shape":"circle","dimensions":{"radius":1,"length":2,"width":3}}',
        ),
        (
            DIMENSIONS,
            "oneOf",
            EngineName.XGRAMMAR,
            '{"shape":"rectangle","dimensions":{"radius":1,"width":3}}',
            '{"shape":"rectangle","dimensions":{"width":3}}',
        ),
        # xgrammar does not enforce multipleOf: llguidance serves it.
        (CONDITION, "if", EngineName.LLGUIDANCE, '{"n":-5}', '{"n":-11}'),
        (CONDITION, "if", EngineName.LLGUIDANCE, '{"n":4}', '{"n":3}'),
        (FLAGGED, "if", EngineName.XGRAMMAR, '{"a":true,"b":1}', '{"a":true}'),
        (FLAGGED, "if", EngineName.XGRAMMAR, '{"a":false,"b":-1}', '{"a":false,"b":1}'),
    ],
)
def test_combinators_refused_before_are_served_and_enforced(
    routed: RoutedEngine,
    schema: Any,
    refused_for: str,
    engine: EngineName,
    valid: str,
    invalid: str,
) -> None:
    # As written, xgrammar would not enforce them (it reads oneOf as anyOf).
    assert refused_for in {finding.keyword for finding in analyze(schema, XGRAMMAR)}
    spec = compact_json_spec(schema)
    assert route(spec).engine is engine
    assert routed_accepts(routed, spec, valid)
    assert not routed_accepts(routed, spec, invalid)


# --- absent properties as xgrammar is given them ----------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (
            {"type": "object", "properties": {"a": False, "b": {}}},
            {"type": "object", "properties": {"b": {}}},
        ),
        (
            {"anyOf": [{"properties": {"a": False}, "additionalProperties": False}]},
            {"anyOf": [{"properties": {}, "additionalProperties": False}]},
        ),
    ],
)
def test_an_absent_property_is_left_unlisted_for_xgrammar(schema: Any, expected: Any) -> None:
    assert absent_properties_unlisted(schema) == expected


@pytest.mark.parametrize(
    "schema",
    [
        # Each would let the name in once unlisted, or no object passes anyway.
        {"properties": {"a": False}, "additionalProperties": {"type": "integer"}},
        {"properties": {"a": False}, "patternProperties": {"^a": {}}},
        {"properties": {"a": False}, "required": ["a"]},
        {"enum": [{"properties": {"a": False}}]},  # a value, not a schema
    ],
)
def test_an_absent_property_stays_where_unlisting_would_change_the_schema(schema: Any) -> None:
    assert absent_properties_unlisted(schema) == schema


def test_keywords_llguidance_cannot_enforce_are_named_before_xgrammar_s_false() -> None:
    # xgrammar cannot build the false property next to patterns ("Schema
    # 'false'"), which the client did write; llguidance names what it
    # cannot enforce, which tells the client what to change.
    schema = {
        "type": "object",
        "properties": {"a": False, "l": {"type": "array", "uniqueItems": True}},
        "patternProperties": {"^b": {}},
    }
    with pytest.raises(UnenforcedKeywordError, match="'uniqueItems'"):
        route(compact_json_spec(schema))
