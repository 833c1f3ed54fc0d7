"""``dependentRequired``, ``dependentSchemas`` and draft-07 ``dependencies`` written as an anyOf.

What the rewrite writes for each form, what it leaves as written, and the
engines serving the result. That every rewrite accepts exactly what the
schema accepts, on random schemas and on the repository's data, is in
``test_schema_rewrite_equivalence.py``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from unit_tests.conftest import compact_json_spec, routed_accepts
from unit_tests.core.schema.test_schema_rewrite_equivalence import assert_equivalent
from unit_tests.xgrammar_acceptance import accepts_text, compile_schema

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.dependencies import KEYWORDS
from grammar_guard.core.schema.rewrite import rewrite_schema

A_B = {"a": {"type": "integer"}, "b": {"type": "string"}}
OBJECT = {"type": "object", "properties": A_B}
CLOSED = {**OBJECT, "additionalProperties": False}

# (id, schema, what the rewrite writes)
REWRITTEN: list[tuple[str, Any, Any]] = [
    (
        "a required dependency: the trigger absent, or present with its dependents",
        {**OBJECT, "dependentRequired": {"a": ["b"]}},
        {
            "anyOf": [
                {"type": "object", "properties": {**A_B, "a": False}},
                {"type": "object", "properties": A_B, "required": ["a", "b"]},
            ]
        },
    ),
    (
        "a closed object need not list an absent property: as an additional one it is refused",
        {**CLOSED, "dependentRequired": {"a": ["b"]}},
        {
            "anyOf": [
                {"type": "object", "properties": {"b": A_B["b"]}, "additionalProperties": False},
                {
                    "type": "object",
                    "properties": A_B,
                    "additionalProperties": False,
                    "required": ["a", "b"],
                },
            ]
        },
    ),
    (
        "a dependent schema merged into the branch where its trigger is present",
        {
            **OBJECT,
            "dependentSchemas": {"a": {"properties": {"a": {"minimum": 1}}, "maxProperties": 1}},
        },
        {
            "anyOf": [
                {"type": "object", "properties": {**A_B, "a": False}},
                {
                    "type": "object",
                    "properties": {**A_B, "a": {"type": "integer", "minimum": 1}},
                    "required": ["a"],
                    "maxProperties": 1,
                },
            ]
        },
    ),
    (
        "draft-07 dependencies of both forms; a branch no object passes is left out",
        {**CLOSED, "dependencies": {"a": ["b"], "b": {"properties": {"b": {"maxLength": 3}}}}},
        {
            "anyOf": [
                {"type": "object", "properties": {}, "additionalProperties": False},
                {
                    "type": "object",
                    "properties": {"b": {"type": "string", "maxLength": 3}},
                    "additionalProperties": False,
                    "required": ["b"],
                },
                # (a present, b absent) requires b, which it forbids: left out.
                {
                    "type": "object",
                    "properties": {**A_B, "b": {"type": "string", "maxLength": 3}},
                    "additionalProperties": False,
                    "required": ["a", "b"],
                },
            ]
        },
    ),
    (
        "a dependency no object meets: the trigger must be absent, no anyOf needed",
        {**OBJECT, "dependentSchemas": {"a": False}},
        {"type": "object", "properties": {**A_B, "a": False}},
    ),
    (
        "annotations and definitions stay beside the anyOf, references still resolve",
        {
            "title": "t",
            "$defs": {"n": {"type": "integer"}},
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/n"}},
            "dependentRequired": {"a": ["b"]},
        },
        {
            "title": "t",
            "$defs": {"n": {"type": "integer"}},
            "anyOf": [
                {"type": "object", "properties": {"a": False}},
                {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/n"}},
                    "required": ["a", "b"],
                },
            ],
        },
    ),
    (
        "a dependency that asks nothing is no trigger",
        {**OBJECT, "dependentRequired": {"a": [], "b": ["a"]}, "dependentSchemas": {"a": {}}},
        {
            "anyOf": [
                {"type": "object", "properties": {**A_B, "b": False}},
                {"type": "object", "properties": A_B, "required": ["b", "a"]},
            ]
        },
    ),
    (
        "other types pass the branches as they passed the schema",
        {"type": ["object", "null"], "minProperties": 1, "dependentRequired": {"a": ["b"]}},
        {
            "anyOf": [
                {"type": ["object", "null"], "minProperties": 1, "properties": {"a": False}},
                {"type": ["object", "null"], "minProperties": 1, "required": ["a", "b"]},
            ]
        },
    ),
    (
        "triggers that ask for the same names as one: all absent, or those names present",
        {**OBJECT, "dependentRequired": {name: ["b"] for name in "acde"}},
        {
            "anyOf": [
                {"type": "object", "properties": {**A_B, **dict.fromkeys("acde", False)}},
                {"type": "object", "properties": A_B, "required": ["b"]},
            ]
        },
    ),
    (
        "a required trigger's dependency always holds, and may make the next one required",
        {**OBJECT, "required": ["a"], "dependentRequired": {"a": ["b"], "b": ["c"], "d": ["a"]}},
        {"type": "object", "properties": A_B, "required": ["a", "b", "c"]},
    ),
    (
        "only dependencies that ask nothing, or only for names already required",
        {
            **OBJECT,
            "required": ["b"],
            "dependentRequired": {"a": [], "c": ["b"]},
            "dependentSchemas": {"b": {"title": "t"}},
        },
        {**OBJECT, "required": ["b"]},
    ),
    (
        "an anyOf beside with two branches left: the dependencies written in each",
        {
            **CLOSED,
            "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
            "dependentRequired": {"b": ["a"]},
        },
        {
            "anyOf": [
                {**CLOSED, "required": ["a"]},  # a is there: b's dependency is met
                {**CLOSED, "required": ["b", "a"]},  # b is there: a must be
            ]
        },
    ),
    (
        "an anyOf beside, merged first (boolean_forms.py): its trigger is then required",
        {
            **OBJECT,
            "anyOf": [{"type": "object", "required": ["a"]}, {"type": "null"}],
            "dependentRequired": {"a": ["b"]},
        },
        {"type": "object", "properties": A_B, "required": ["a", "b"]},
    ),
]

# (id, schema): left exactly as written, each for the reason its id gives.
KEPT: list[tuple[str, Any]] = [
    (
        "four triggers asking for different names, sixteen branches",
        {**OBJECT, "dependentRequired": {"a": ["b"], "c": ["a"], "d": ["c"], "e": ["d"]}},
    ),
    (
        "an enum beside, of a value not decided (a lookahead)",
        {
            "enum": [{"a": "x", "b": "x"}, {"b": "y"}],
            "dependentSchemas": {
                "a": {"properties": {"b": {"type": "string", "pattern": "(?=x)"}}}
            },
        },
    ),
    (
        "a reference beside",
        {"$defs": {"o": OBJECT}, "$ref": "#/$defs/o", "dependentRequired": {"a": ["b"]}},
    ),
    ("a dependent name that is no string", {**OBJECT, "dependentRequired": {"a": [1]}}),
    ("dependentSchemas given names", {**OBJECT, "dependentSchemas": {"a": ["b"]}}),
    ("a draft-03 dependency named by a string", {**OBJECT, "dependencies": {"a": "b"}}),
    (
        "a draft-07 dependency schema with a reference, which the reference guard does not see",
        {
            "$defs": {"n": {"type": "object", "required": ["b"]}},
            **OBJECT,
            "dependencies": {"a": {"$ref": "#/$defs/n"}},
        },
    ),
    (
        "patterns next to a closed object: no merge writes the absent branch",
        {**CLOSED, "patternProperties": {"^x": {}}, "dependentRequired": {"a": ["b"]}},
    ),
    (
        "a reference into the schema",
        {
            "type": "object",
            "properties": {
                "o": {**OBJECT, "dependentRequired": {"a": ["b"]}},
                "p": {"$ref": "#/properties/o/properties/a"},
            },
        },
    ),
]


@pytest.mark.parametrize(
    ("schema", "expected"), [r[1:] for r in REWRITTEN], ids=[r[0] for r in REWRITTEN]
)
def test_each_form_is_written_as_its_branches(schema: Any, expected: Any) -> None:
    assert assert_equivalent(schema, INSTANCES) == expected


# Objects with and without the triggers and their dependents, and values of other types.
INSTANCES: list[Any] = [
    {},
    {"a": 1},
    {"b": "x"},
    {"a": 1, "b": "x"},
    {"a": 0, "b": "xxxx"},
    {"a": 2, "b": 3},
    {"c": 1},
    None,
    1,
    "x",
    [{"a": 1}],
]


@pytest.mark.parametrize("schema", [k[1] for k in KEPT], ids=[k[0] for k in KEPT])
def test_what_no_exact_rewrite_exists_for_is_left_as_written(schema: Any) -> None:
    assert rewrite_schema(schema) is schema


def test_the_suite_s_examples_keep_their_verdicts() -> None:
    schema = {"dependentRequired": {"quux": ["foo", "bar"]}}
    instances = [{}, {"foo": 1, "bar": 2, "quux": 3}, {"foo": 1, "quux": 2}, {"quux": 1}, 12, "x"]
    assert assert_equivalent(schema, instances) is not schema
    legacy = {"dependencies": {"bar": {"properties": {"foo": {"type": "integer"}}}}}
    instances = [{"foo": 1, "bar": 2}, {"foo": "quux"}, {"foo": "quux", "bar": 2}, ["bar"]]
    assert assert_equivalent(legacy, instances) is not legacy


def _nested(levels: int) -> dict[str, Any]:
    """Dependencies in the properties of dependencies, ``levels`` deep, three triggers each."""
    schema: dict[str, Any] = {"type": "object", "properties": {"x": {"type": "integer"}}}
    for _ in range(levels):
        schema = {
            "type": "object",
            "properties": {"a": {}, "b": {}, "c": {}, "d": schema},
            "dependentRequired": {"a": ["b"], "b": ["c"], "c": ["a"]},
        }
    return schema


@pytest.mark.parametrize("levels", [5, 40, 300])
def test_nested_dependencies_grow_the_document_boundedly_and_quickly(levels: int) -> None:
    # Written out in full, each level's branches would copy all the levels
    # below, and theirs: the growth bound stops that, level by level.
    schema = _nested(levels)
    started = time.perf_counter()
    rewritten = rewrite_schema(schema)
    assert time.perf_counter() - started < 2.0
    # The rewrite's bound on the whole document: twice its values, and some.
    assert _values(rewritten) <= 2 * _values(schema) + 1024
    if levels == 5:
        assert json.dumps(rewritten).count("anyOf") >= 4  # the inner levels at least


def _values(document: Any) -> int:
    if isinstance(document, dict):
        return 1 + sum(map(_values, document.values()))
    if isinstance(document, list):
        return 1 + sum(map(_values, document))
    return 1


# --- the engines serve what they refused before ------------------------------------------


REQUIRED = {**OBJECT, "dependentRequired": {"a": ["b"]}}
CLOSED_REQUIRED = {**CLOSED, "dependentRequired": {"a": ["b"]}}
# As the WashingtonPost schemas write it (draft-04): a website makes the type a section.
REFERENT = {
    "type": "object",
    "properties": {"type": {"type": "string"}, "website": {"type": "string"}},
    "additionalProperties": False,
    "dependencies": {"website": {"properties": {"type": {"enum": ["section"]}}}},
}


# An address: a post box (p) or extra line (e) needs a street (s), which needs
# the region (r), which needs the country (c); the region and country are required.
# (xgrammar writes properties in the order the schema lists them.)
ADDRESS = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in "pesrc"},
    "required": ["r", "c"],
    "dependencies": {"p": ["s"], "e": ["s"], "s": ["r"], "r": ["c"]},
}


@pytest.mark.parametrize(
    ("schema", "engine", "valid", "invalid"),
    [
        # The absent branch's false property is left unlisted for xgrammar,
        # whose objects are closed (xgrammar_rewrite).
        (REQUIRED, EngineName.XGRAMMAR, '{"a":1,"b":"x"}', '{"a":1}'),
        (REQUIRED, EngineName.XGRAMMAR, '{"b":"x"}', '{"a":1,"b":2}'),
        # A closed object needs none.
        (CLOSED_REQUIRED, EngineName.XGRAMMAR, '{"a":1,"b":"x"}', '{"a":1}'),
        (CLOSED_REQUIRED, EngineName.XGRAMMAR, "{}", '{"a":"x","b":"x"}'),
        (
            REFERENT,
            EngineName.XGRAMMAR,
            '{"type":"section","website":"w"}',
            '{"type":"x","website":"w"}',
        ),
        (REFERENT, EngineName.XGRAMMAR, '{"type":"x"}', '{"website":"w","type":"x"}'),
        # Github_easy o49986 (draft-04): five triggers, of which two split the objects.
        (
            ADDRESS,
            EngineName.XGRAMMAR,
            '{"p":"x","s":"x","r":"x","c":"x"}',
            '{"p":"x","r":"x","c":"x"}',
        ),
        (ADDRESS, EngineName.XGRAMMAR, '{"r":"x","c":"x"}', '{"e":"x","r":"x","c":"x"}'),
    ],
)
def test_dependencies_refused_before_are_served_and_enforced(
    routed: RoutedEngine, schema: Any, engine: EngineName, valid: str, invalid: str
) -> None:
    # Refused before: neither engine enforces a dependency.
    assert {finding.keyword for finding in analyze(schema, XGRAMMAR)} & set(KEYWORDS)
    spec = compact_json_spec(schema)
    assert route(spec).engine is engine
    assert routed_accepts(routed, spec, valid)
    assert not routed_accepts(routed, spec, invalid)


def test_calibration_xgrammar_refuses_a_false_property_schema() -> None:
    # Why xgrammar is given an absent property unlisted rather than false.
    # Should xgrammar come to read false as "absent", that rewrite can go.
    with pytest.raises(RuntimeError, match="cannot accept any value"):
        compile_schema({"type": "object", "properties": {"a": False}})
    assert accepts_text(compile_schema({"type": "object", "properties": {"a": {}}}), '{"a":1}')
