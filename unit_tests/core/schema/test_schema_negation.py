"""The simplest ``not``\\ s written as what they leave: neither engine enforces ``not``.

What the rewrite writes for each form, what it leaves as written, and the
engines serving the result. That every rewrite accepts exactly what the
schema accepts, on random schemas and on the repository's data, is in
``test_schema_rewrite_equivalence.py``.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.conftest import compact_json_spec, routed_accepts
from unit_tests.core.schema.test_schema_rewrite_equivalence import assert_equivalent

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.negation import values_outside
from grammar_guard.core.schema.rewrite import rewrite_schema
from grammar_guard.core.schema.values import json_equal

NOT_NUMBER = ["null", "boolean", "object", "array", "string"]

# (id, schema, what the rewrite writes)
REWRITTEN: list[tuple[str, Any, Any]] = [
    ("not of everything", {"type": "integer", "not": {}}, False),
    ("not true", {"not": True}, False),
    ("not of annotations only", {"not": {"title": "t", "minLength": 0}}, False),
    (
        "a property that may not appear",
        {"type": "object", "properties": {"x": {"not": {}}, "y": {"type": "integer"}}},
        {"type": "object", "properties": {"x": False, "y": {"type": "integer"}}},
    ),
    ("not false", {"type": "string", "not": False, "title": "t"}, {"type": "string", "title": "t"}),
    # --- types
    (
        "not a number: no integer either",
        {"not": {"type": "number"}, "minLength": 2},
        {"minLength": 2, "type": NOT_NUMBER},
    ),
    (
        "not null, of a nullable string",
        {"type": ["string", "null"], "not": {"type": "null"}},
        {"type": "string"},
    ),
    (
        "not integers, of integers or strings",
        {"type": ["integer", "string", "boolean"], "not": {"type": ["integer", "boolean"]}},
        {"type": "string"},
    ),
    ("not a number, of an integer", {"type": "integer", "not": {"type": "number"}}, False),
    ("a not of a not", {"not": {"not": {"type": "string"}}}, {"type": "string"}),
    (
        "a not merged from an allOf",
        {"allOf": [{"type": ["integer", "null"]}, {"not": {"type": "null"}}]},
        {"type": "integer"},
    ),
    # --- values
    (
        "not true, of a boolean",
        {"type": "boolean", "not": {"const": True}},
        {"enum": [False]},
    ),
    (
        "not null, of booleans or null",
        {"type": ["boolean", "null"], "not": {"enum": [None, 1]}},
        {"enum": [True, False]},
    ),
    ("values of an enum", {"enum": [1, 2.0, "a"], "not": {"enum": [2, "b"]}}, {"enum": [1, "a"]}),
    (
        "values of an enum, of a pattern",
        {"enum": ["a", "b"], "not": {"type": "string", "pattern": "^a"}},
        {"enum": ["b"]},
    ),
    (
        "the strings of an enum",
        {"enum": [1, "a", None], "not": {"type": "string"}},
        {"enum": [1, None]},
    ),
    (
        "values of a type and an enum",
        {"enum": [1, "a", "b"], "not": {"type": "string", "enum": ["a", 1]}},
        {"enum": [1, "b"]},
    ),
    ("a const the not rejects", {"const": "a", "not": {"const": "a"}}, False),
    ("a const the not lets through", {"const": "a", "not": {"enum": ["b"]}}, {"const": "a"}),
    ("true is not 1", {"enum": [True, 1], "not": {"const": 1}}, {"enum": [True]}),
    (
        "a value of an integer: the integers on each side",
        {"type": "integer", "not": {"const": 3}},
        {"anyOf": [{"type": "integer", "maximum": 2}, {"type": "integer", "minimum": 4}]},
    ),
    (
        "named values of any type: the other types, and the numbers and strings around them",
        {"not": {"enum": [True, 1, "a"]}},
        {
            "anyOf": [
                {"type": ["null", "object", "array"]},
                {"const": False},
                {"type": "string", "pattern": "^(?:|[^a](?:[^a]|a)*|a(?:(?:[^a]|a)+))$"},
                {"type": "number", "exclusiveMaximum": 1},
                {"type": "number", "exclusiveMinimum": 1},
            ]
        },
    ),
    (
        "a not of more than a type: its bound's complement (boolean_forms.py)",
        {"type": "string", "not": {"type": "string", "maxLength": 2}},
        {"type": "string", "minLength": 3},
    ),
]

# (id, schema): left exactly as written, each for the reason its id gives.
KEPT: list[tuple[str, Any]] = [
    ("not an integer: the other numbers have no type name", {"not": {"type": "integer"}}),
    ("not an integer, of numbers", {"type": "number", "not": {"type": ["integer", "string"]}}),
    ("an object among the values: no schema says the other objects", {"not": {"const": {}}}),
    (
        "a not of a pattern not decided (a lookahead)",
        {"enum": ["a", "b"], "not": {"type": "string", "pattern": "(?=a)"}},
    ),
    ("a not of a reference", {"$defs": {"n": {"type": "null"}}, "not": {"$ref": "#/$defs/n"}}),
    ("definitions a false schema would lose", {"$defs": {"n": {}}, "not": {}}),
    ("a type no draft defines", {"type": "integr", "not": {}}),
    ("a negated type no draft defines", {"not": {"type": "float"}}),
    ("an enum that is no list", {"type": "boolean", "not": {"enum": True}}),
    ("a not that is no schema", {"type": "string", "not": "x"}),
]

INSTANCES: list[Any] = [None, True, False, 0, 1, 2, 1.5, "a", "b", "ab", [], {}, {"x": 1}, {"y": 2}]


@pytest.mark.parametrize(
    ("schema", "expected"), [r[1:] for r in REWRITTEN], ids=[r[0] for r in REWRITTEN]
)
def test_each_not_is_written_as_what_it_leaves(schema: Any, expected: Any) -> None:
    assert assert_equivalent(schema, INSTANCES) == expected


@pytest.mark.parametrize("schema", [k[1] for k in KEPT], ids=[k[0] for k in KEPT])
def test_what_no_exact_rewrite_exists_for_is_left_as_written(schema: Any) -> None:
    assert rewrite_schema(schema) is schema


_TYPE_NAMES = ("null", "boolean", "object", "array", "string", "integer", "number")
_NUMBERS = (-2, 0, 1, 3, 4, 1.5, 2.0)
_NAMED = st.lists(
    st.none() | st.booleans() | st.sampled_from(_NUMBERS) | st.sampled_from(("", "a", "ab", "b")),
    max_size=6,
)
# Every type, each named number and its neighbours, integers and fractions.
_PROBES = [
    *(None, True, False, "", "a", "ab", "b", "abc", "ba", [], {}),
    *(number + step for number in _NUMBERS for step in (-1, -0.5, 0, 0.5, 1)),
]


@settings(max_examples=300, deadline=None)
@given(
    named=_NAMED,
    types=st.lists(st.sampled_from(_TYPE_NAMES), min_size=1, max_size=3, unique=True),
)
def test_values_outside_holds_exactly_the_values_of_its_types_not_named(
    named: list[Any], types: list[str]
) -> None:
    outside = values_outside(named, tuple(types))
    assert outside is not None
    for value in _PROBES:
        expected = jsonschema.Draft202012Validator({"type": types}).is_valid(value) and not any(
            json_equal(value, name) for name in named
        )
        got = jsonschema.Draft202012Validator(outside).is_valid(value)
        assert got == expected, (named, types, outside, value)


def test_an_integer_past_the_floats_is_bounded_as_an_integer() -> None:
    huge = 10**400  # JSON allows it; float() of it overflows
    assert values_outside([huge, 1.5], ("integer",)) == {
        "anyOf": [
            {"type": "integer", "maximum": huge - 1},
            {"type": "integer", "minimum": huge + 1},
        ]
    }


# --- the engines serve what they refused before ------------------------------------------


FORBIDDEN = {"type": "object", "properties": {"x": {"not": {}}, "y": {"type": "integer"}}}
ENUM = {
    "type": "object",
    "properties": {"x": {"enum": ["a", "b", "c"], "not": {"const": "b"}}},
    "required": ["x"],
}
NOT_NULL = {
    "type": "object",
    "properties": {"x": {"type": ["integer", "null"], "not": {"type": "null"}}},
    "required": ["x"],
}


@pytest.mark.parametrize(
    ("schema", "engine", "valid", "invalid"),
    [
        # xgrammar builds no false subschema, but its objects are closed:
        # the forbidden property is left unlisted (xgrammar_rewrite).
        (FORBIDDEN, EngineName.XGRAMMAR, '{"y":1}', '{"x":1}'),
        (ENUM, EngineName.XGRAMMAR, '{"x":"a"}', '{"x":"b"}'),
        (NOT_NULL, EngineName.XGRAMMAR, '{"x":1}', '{"x":null}'),
    ],
)
def test_nots_refused_before_are_served_and_enforced(
    routed: RoutedEngine, schema: Any, engine: EngineName, valid: str, invalid: str
) -> None:
    assert [finding.keyword for finding in analyze(schema, XGRAMMAR)] == ["not"]
    spec = compact_json_spec(schema)
    assert route(spec).engine is engine
    assert routed_accepts(routed, spec, valid)
    assert not routed_accepts(routed, spec, invalid)


def test_a_schema_that_accepts_nothing_stays_refused() -> None:
    with pytest.raises(InvalidGrammarError):
        route(compact_json_spec({"type": "object", "not": {}}))
