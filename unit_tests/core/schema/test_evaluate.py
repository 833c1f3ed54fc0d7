"""One value against a schema, decided without an engine, or left undecided.

Held to the ``jsonschema`` oracle on random schemas of every keyword the
generators know (patterns, formats and references included, which it must
leave undecided): a verdict it gives is the oracle's, and it gives one often.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.core.schema.test_schema_rewrite_equivalence import (
    _DEFINITION,
    _VALUES,
    _schemas,
    assert_equivalent,
    near,
    verdicts,
)

from grammar_guard.core.schema.evaluate import MAX_DEPTH, MAX_VISITS, validates
from grammar_guard.core.schema.string_complement import pattern_outside


@st.composite
def _evaluated_schemas(draw: st.DrawFn) -> Any:
    """The generators' schemas, often under the combinators they leave out."""
    part = _schemas(depth=1)
    schema = draw(_schemas())
    extra = draw(st.sampled_from(("", "oneOf", "if", "dependentSchemas", "contains")))
    if extra == "oneOf":
        schema["oneOf"] = draw(st.lists(part, min_size=1, max_size=3))
    elif extra == "if":
        schema["if"], schema["then"], schema["else"] = draw(part), draw(part), draw(part)
    elif extra == "dependentSchemas":
        schema["dependentSchemas"] = {"a": draw(part)}
    elif extra == "contains":
        schema.update(contains=draw(part), minContains=draw(st.integers(0, 2)))
    return {**schema, "$defs": _DEFINITION}


def test_every_verdict_is_the_oracle_s() -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(st.data())
    def check(data: st.DataObject) -> None:
        schema = data.draw(_evaluated_schemas(), label="schema")
        values = data.draw(st.lists(near(schema) | _VALUES, min_size=8, max_size=16))
        for value, oracle in zip(values, verdicts(schema, values), strict=True):
            verdict = validates(value, schema)
            if verdict is None or oracle == "error":
                seen["undecided"] += 1
                continue
            seen["valid" if verdict else "invalid"] += 1
            assert verdict is oracle, (schema, value)

    check()
    # Not vacuous: many decided each way.
    assert seen["valid"] >= 500 and seen["invalid"] >= 500, seen


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "pattern": "(?=a)"}, "a"),  # a lookahead: not read
        ({"format": "email"}, "x@y.z"),
        ({"$ref": "#/$defs/d"}, 1),
        ({"patternProperties": {"\\ba": {}}}, {"a": 1}),
        ({"unevaluatedProperties": False}, {"a": 1}),
        ({"anyOf": [{"pattern": "(?<=a)"}, {"type": "integer"}]}, "b"),
    ],
)
def test_what_needs_an_engine_or_a_place_is_undecided(schema: Any, value: Any) -> None:
    assert validates(value, schema) is None


def test_a_pattern_the_rewrite_wrote_for_strings_outside_some_is_decided_by_them() -> None:
    # The inner not of a schema is rewritten first; the enum beside the outer
    # one is then decided against that (Synthesized enum_id6: was refused).
    outside = {"type": "string", "pattern": pattern_outside(["bar", "b"])}
    assert [validates(value, outside) for value in ("bar", "b", "ba", "", 1)] == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert validates("bar", {"pattern": pattern_outside(["bar"]) + "?"}) is None


@pytest.mark.parametrize(
    ("schema", "value", "valid"),
    [
        ({"type": "string", "pattern": "^a"}, "ab", True),
        ({"pattern": "b$"}, "b\n", False),  # ECMA-262's $ is the very end
        ({"patternProperties": {"^a": {"type": "integer"}}}, {"ab": "x"}, False),
        ({"patternProperties": {"^a": {}}, "additionalProperties": False}, {"b": 1}, False),
        ({"patternProperties": {"^a": {}}, "additionalProperties": False}, {"a": 1}, True),
    ],
)
def test_patterns_are_decided_as_ecma_262_reads_them(schema: Any, value: Any, valid: bool) -> None:
    assert validates(value, schema) is valid


def test_a_failing_keyword_decides_beside_an_undecided_one() -> None:
    assert validates("b", {"type": "integer", "pattern": "(?=a)"}) is False
    assert validates(3, {"type": "string", "pattern": "(?=a)"}) is False


def test_the_work_is_bounded() -> None:
    deep: Any = {}
    for _ in range(MAX_DEPTH + 1):
        deep = {"allOf": [deep]}
    assert validates(1, deep) is None
    wide: Any = {"type": "integer"}
    for _ in range(13):  # each level doubles the visits: 2**13 > MAX_VISITS
        wide = {"anyOf": [{"not": wide}, wide]}
    assert MAX_VISITS < 2**13 and validates(1, wide) is None


# --- an enum beside a not: the named values the not leaves ------------------------------------


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        # As the jsonschemabench "Synthesized" schemas write it (draft2019_09_valid_allOf_id4).
        (
            {
                "allOf": [
                    {"enum": [{"bar": "quux", "foo": "baz"}, {"bar": 2, "foo": "baz"}]},
                    {
                        "not": {
                            "allOf": [
                                {"properties": {"bar": {"type": "integer"}}, "required": ["bar"]},
                                {"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
                            ]
                        }
                    },
                ]
            },
            {"enum": [{"bar": "quux", "foo": "baz"}]},
        ),
        ({"const": 5, "not": {"oneOf": [{"minimum": 3}, {"multipleOf": 5}]}}, {"const": 5}),
        ({"enum": [1, "a"], "not": {"anyOf": [{"type": "string"}, {"maximum": 1}]}}, False),
    ],
)
def test_an_enum_beside_a_not_is_the_values_it_leaves(schema: Any, expected: Any) -> None:
    values = [{"bar": "quux", "foo": "baz"}, {"bar": 2, "foo": "baz"}, 5, 1, "a", None]
    assert assert_equivalent(schema, values) == expected


def test_an_enum_beside_a_not_that_needs_an_engine_stays_as_written() -> None:
    schema = {"enum": ["a", "b"], "not": {"pattern": "(?=a)"}}
    assert "not" in assert_equivalent(schema, ["a", "b", "c"])


def test_an_enum_beside_a_not_of_a_pattern_is_the_values_it_leaves() -> None:
    schema = {"enum": ["a", "b"], "not": {"pattern": "^a"}}
    assert assert_equivalent(schema, ["a", "b", "c"]) == {"enum": ["b"]}


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integr"}, 1),
        ({"enum": "a"}, "a"),
        ({"required": "a"}, {"a": 1}),
        ({"uniqueItems": "yes"}, [1, 1]),
    ],
)
def test_a_malformed_keyword_is_undecided_for_the_engine_to_report(schema: Any, value: Any) -> None:
    assert validates(value, schema) is None
