"""The schema rewrites: what each one writes, what it leaves as written, and the engines serving
the result.

Equivalence on random schemas and on the repository's data is in
``test_schema_rewrite_equivalence.py``; here each rule is shown on a schema,
and schemas refused before are compiled and matched through the routed engine.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from unit_tests.conftest import (
    COMPACT,
    SmallTokenizer,
    compact_json_spec,
    routed_accepts,
)
from unit_tests.core.schema.test_schema_rewrite_equivalence import assert_equivalent
from unit_tests.xgrammar_acceptance import accepts_text, compile_schema

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar import engine as xgrammar_engine
from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.formats import format_pattern
from grammar_guard.core.schema.keyword_checks import unwritable_range
from grammar_guard.core.schema.rewrite import rewrite_schema, rewritten_schema_text
from grammar_guard.core.settings import EngineSelection

OTHERS_THAN_NUMBER = ["null", "boolean", "object", "array", "string"]
DATE = format_pattern("date")
HOSTNAME = format_pattern("hostname")

# (id, schema, what the rewrite writes)
REWRITTEN: list[tuple[str, Any, Any]] = [
    # --- allOf
    (
        "types and bounds",
        {"allOf": [{"type": "number", "minimum": 1}, {"type": "integer", "minimum": 3}]},
        {"type": "integer", "minimum": 3},
    ),
    (
        "the tighter of each bound and count",
        {
            "type": "string",
            "maxLength": 5,
            "allOf": [{"maxLength": 3, "minLength": 1}, {"minLength": 2}],
        },
        {"type": "string", "maxLength": 3, "minLength": 2},
    ),
    (
        "enums intersected; required, which no value is an object for, dropped",
        {
            "allOf": [
                {"enum": [1, 2, "a"], "required": ["a"]},
                {"enum": [2.0, "a"], "required": ["b"]},
            ]
        },
        {"enum": [2, "a"]},
    ),
    (
        "a property in two branches gets both schemas",
        {
            "type": "object",
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"maximum": 9}, "b": {"type": "string"}}},
            ],
        },
        {
            "type": "object",
            "properties": {"a": {"type": "integer", "maximum": 9}, "b": {"type": "string"}},
            "required": ["a"],
        },
    ),
    (
        "a referenced base",
        {
            "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}}},
            "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}}],
        },
        {
            "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}}},
            "type": "object",
            "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
        },
    ),
    (
        "additionalProperties false refuses what the other branch adds",
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"properties": {"b": {"type": "string"}}},
            ]
        },
        {"properties": {"a": {"type": "integer"}}, "additionalProperties": False},
    ),
    (
        "an additionalProperties schema applies to what the other branch adds",
        {
            "allOf": [
                {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
                {"properties": {"b": {"minimum": 1}}},
            ]
        },
        {
            "properties": {"a": {}, "b": {"minimum": 1, "type": "integer"}},
            "additionalProperties": {"type": "integer"},
        },
    ),
    (
        "tuples of different lengths",
        {
            "allOf": [
                {"prefixItems": [{"type": "integer"}]},
                {"items": {"type": "number", "minimum": 0}},
            ]
        },
        {
            "prefixItems": [{"type": "integer", "minimum": 0}],
            "items": {"type": "number", "minimum": 0},
        },
    ),
    (
        "a multipleOf that divides the other",
        {"allOf": [{"type": "integer", "multipleOf": 2}, {"multipleOf": 6}]},
        {"type": "integer", "multipleOf": 6},
    ),
    (
        "one anyOf among the branches",
        {"allOf": [{"type": "object"}, {"anyOf": [{"const": {"a": 1}}, {"const": {"b": 2}}]}]},
        # Merged, then the type written into each branch of the anyOf (boolean_forms.py).
        {
            "anyOf": [
                {"type": "object", "const": {"a": 1}},
                {"type": "object", "const": {"b": 2}},
            ]
        },
    ),
    (
        "a property whose schemas do not merge keeps them as an allOf",
        {
            "allOf": [
                {"properties": {"a": {"type": "string", "pattern": "^a"}}},
                {"properties": {"a": {"type": "string", "pattern": "b$"}}},
            ]
        },
        {
            "properties": {
                "a": {
                    "allOf": [
                        {"type": "string", "pattern": "^a"},
                        {"type": "string", "pattern": "b$"},
                    ]
                }
            }
        },
    ),
    # --- untyped schemas
    (
        "a typeless bound",
        {"minimum": 2, "title": "t"},
        {"title": "t", "anyOf": [{"type": "number", "minimum": 2}, {"type": OTHERS_THAN_NUMBER}]},
    ),
    (
        "keywords of several types",
        {"maxLength": 3, "minimum": 0},
        {
            "anyOf": [
                {"type": "string", "maxLength": 3},
                {"type": "number", "minimum": 0},
                {"type": ["null", "boolean", "object", "array"]},
            ]
        },
    ),
    (
        "merged branches that give no type",
        {"allOf": [{"minimum": 1}, {"maximum": 5}]},
        {"anyOf": [{"type": "number", "minimum": 1, "maximum": 5}, {"type": OTHERS_THAN_NUMBER}]},
    ),
    # --- counts
    (
        "a count written as a whole float",
        {"type": "array", "maxItems": 2.0, "minItems": 0.5},
        {"type": "array", "maxItems": 2, "minItems": 0.5},
    ),
    # --- formats
    (
        "a format with an exact pattern",
        {"type": "string", "format": "date", "maxLength": 10},
        {"type": "string", "pattern": DATE, "maxLength": 10},
    ),
    (
        "a typeless format applies to strings only",
        {"format": "date"},
        {
            "anyOf": [
                {"type": "string", "pattern": DATE},
                {"type": ["null", "boolean", "object", "array", "number"]},
            ]
        },
    ),
    (
        "a host name's total length as maxLength",
        {"type": "string", "format": "hostname"},
        {"type": "string", "pattern": HOSTNAME, "maxLength": 253},
    ),
    (
        "a host name keeps a smaller maxLength",
        {"type": "string", "maxLength": 20.0, "format": "hostname"},
        {"type": "string", "maxLength": 20, "pattern": HOSTNAME},
    ),
    (
        "a host name's maxLength no larger than 253",
        {"type": "string", "maxLength": 300, "format": "hostname"},
        {"type": "string", "maxLength": 253, "pattern": HOSTNAME},
    ),
    # --- formats 2020-12 does not define: annotations, which constrain nothing
    (
        "an unknown format is dropped",
        {"type": "string", "format": "semver", "minLength": 5},
        {"type": "string", "minLength": 5},
    ),
    (
        "an unknown format next to a pattern",
        {"type": "string", "pattern": "^v", "format": "url"},
        {"type": "string", "pattern": "^v"},
    ),
    ("a typeless unknown format", {"format": "int64"}, {}),
    (
        "unknown formats in properties",
        {
            "type": "object",
            "properties": {
                "topic": {"type": "string", "format": "topic"},
                "name": {"type": "string", "format": "non-blank", "description": "a name"},
                "format": {"type": "string", "enum": ["date", "semver"]},
            },
        },
        {
            "type": "object",
            "properties": {
                "topic": {"type": "string"},
                "name": {"type": "string", "description": "a name"},
                "format": {"enum": ["date", "semver"]},
            },
        },
    ),
]

REWRITTEN += [
    (
        "propertyNames false: no name at all",
        {"type": "object", "propertyNames": False},
        {"type": "object", "maxProperties": 0},
    ),
    ("propertyNames true: any name", {"type": "object", "propertyNames": True}, {"type": "object"}),
    (
        "prefixItems: true is any item, and no item can fill a false or what follows it",
        {"type": "array", "prefixItems": [True, {"type": "string"}, False, {}], "maxItems": 5},
        {"type": "array", "prefixItems": [{}, {"type": "string"}], "maxItems": 2},
    ),
    (
        "an enum beside a pattern: the values that match",
        {"type": "string", "enum": ["ab", "cd"], "pattern": "^a"},
        {"enum": ["ab"]},
    ),
    (
        "an enum beside a format: the values it holds",
        {"enum": ["2020-01-01", "x"], "format": "date"},
        {"enum": ["2020-01-01"]},
    ),
    (
        "a const beside patternProperties (jsonschemabench pnmp7)",
        {
            "type": "object",
            "patternProperties": {"^[0-9]$": {"type": "array", "minItems": 2}},
            "additionalProperties": False,
            "const": {"1": [1, 2]},
        },
        {"const": {"1": [1, 2]}},
    ),
    ("an enum none of whose values passes", {"enum": [1, 2], "minimum": 5}, False),
    (
        "an untyped schema with an enum: the values decide",
        {"enum": [1, "a", -1], "minimum": 0},
        {"enum": [1, "a"]},
    ),
    (
        "an enum beside a not of patterns (jsonschemabench Synthesized)",
        {
            "allOf": [
                {"enum": [{"a": "bar"}, {"aaa": 2}]},
                {
                    "not": {
                        "patternProperties": {"a*": {"type": "integer"}, "aaa*": {"maximum": 20}}
                    }
                },
            ]
        },
        {"enum": [{"a": "bar"}]},
    ),
    (
        "false branches: no value passes them",
        {"anyOf": [False, {"type": "string"}], "oneOf": [{"minLength": 2}, False]},
        {"type": "string", "minLength": 2},
    ),
    (
        "prefixItems past maxItems",
        {"type": "array", "prefixItems": [{"type": "string"}, {}], "maxItems": 1},
        {"type": "array", "prefixItems": [{"type": "string"}], "maxItems": 1},
    ),
    (
        "prefixItems whose first entry is false: no item at all",
        {"type": "array", "prefixItems": [False], "items": {"type": "string"}},
        {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    ),
]

REWRITTEN += [
    (
        "unevaluatedProperties after the merge: what additionalProperties means",
        {
            "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
            "unevaluatedProperties": False,
        },
        {"properties": {"a": {}, "b": {}}, "additionalProperties": False},
    ),
    (
        "a branch's own unevaluatedProperties refuses what only its neighbour lists",
        {
            "allOf": [
                {"properties": {"a": {}}, "unevaluatedProperties": False},
                {"properties": {"b": {}}},
            ]
        },
        {"properties": {"a": {}}, "additionalProperties": False},
    ),
    (
        "unevaluatedProperties beside additionalProperties evaluates nothing",
        {"properties": {"a": {}}, "additionalProperties": True, "unevaluatedProperties": False},
        {"properties": {"a": {}}, "additionalProperties": True},
    ),
    (
        "unevaluatedItems after prefixItems: what items means",
        {"type": "array", "prefixItems": [{"type": "integer"}], "unevaluatedItems": False},
        {"type": "array", "prefixItems": [{"type": "integer"}], "items": False},
    ),
]

# (id, schema): left exactly as written, each for the reason its id gives.
KEPT: list[tuple[str, Any]] = [
    ("no type in common", {"allOf": [{"type": "integer"}, {"type": "string"}]}),
    ("no value in common", {"allOf": [{"enum": [1, 2]}, {"enum": [3]}]}),
    ("two consts", {"allOf": [{"const": 1}, {"const": 2}]}),
    (
        "two patterns",
        {"allOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
    ),
    (
        # Each next to a pattern of its own, so neither format becomes a pattern.
        "two formats",
        {
            "allOf": [
                {"type": "string", "format": "idn-email", "pattern": "^a"},
                {"type": "string", "format": "idn-hostname", "pattern": "b$"},
            ]
        },
    ),
    (
        "multipleOf neither dividing",
        {"allOf": [{"type": "integer", "multipleOf": 2}, {"type": "number", "multipleOf": 3}]},
    ),
    (
        "multipleOf fractional",
        {"allOf": [{"type": "number", "multipleOf": 0.5}, {"type": "number", "multipleOf": 1.5}]},
    ),
    ("two anyOfs", {"allOf": [{"anyOf": [{"type": "null"}]}, {"anyOf": [{"type": "string"}]}]}),
    (
        "additionalProperties with patterns",
        {
            "allOf": [
                {"patternProperties": {"^x": {}}, "additionalProperties": False},
                {"properties": {"a": {}}},
            ]
        },
    ),
    ("a cycle of references", {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}, {}]}}}),
    (
        "a reference into a branch",
        {
            "allOf": [{"properties": {"a": {"type": "integer"}}}, {"type": "object"}],
            "properties": {"b": {"$ref": "#/allOf/0/properties/a"}},
        },
    ),
    (
        "unevaluatedProperties reads what the anyOf's passing branches evaluated",
        {
            "properties": {"a": {}},
            "anyOf": [{"properties": {"b": {}}}, {"type": "object", "required": ["c"]}],
            "unevaluatedProperties": False,
        },
    ),
    (
        "unevaluatedItems reads the items contains matched",
        {"prefixItems": [{}], "contains": {"type": "string"}, "unevaluatedItems": False},
    ),
    (
        "an embedded $id with a fragment (a draft-07 anchor)",
        {"allOf": [{"$id": "#x", "type": "integer"}, {"type": "integer", "minimum": 1}]},
    ),
    (
        "an embedded $id beside a reference to no resource of the document",
        {"allOf": [{"$id": "x.json", "type": "integer"}, {"$ref": "y.json"}]},
    ),
    ("a remote reference", {"allOf": [{"$ref": "http://x/s.json"}, {"type": "integer"}]}),
    ("only false branches: no value, which the engines say", {"anyOf": [False]}),
    ("an enum beside a pattern not read (a lookahead)", {"enum": ["a"], "pattern": "(?=a)"}),
    ("an untyped object shape", {"properties": {"a": {"type": "integer"}}, "required": ["a"]}),
    ("an untyped schema with a reference", {"$defs": {"n": {}}, "$ref": "#/$defs/n", "minimum": 0}),
    ("type-specific keywords that cannot fail", {"minLength": 0, "minItems": 0}),
    ("property names are strings anyway", {"type": "object", "propertyNames": {"maxLength": 3}}),
    ("a format next to a pattern", {"type": "string", "format": "date", "pattern": "^2"}),
    (
        "a format next to a pattern of its own",
        {"type": "string", "format": "regex", "pattern": "a"},
    ),
    ("a format that is no string", {"type": "string", "format": 5}),
    (
        "a host name next to a maxLength that is no count",
        {"type": "string", "format": "hostname", "maxLength": "x"},
    ),
    ("a host name next to a pattern", {"type": "string", "format": "hostname", "pattern": "^a"}),
]


@pytest.mark.parametrize(
    ("schema", "expected"), [r[1:] for r in REWRITTEN], ids=[r[0] for r in REWRITTEN]
)
def test_each_rewrite_writes_the_equivalent_schema(schema: Any, expected: Any) -> None:
    assert rewrite_schema(schema) == expected


@pytest.mark.parametrize("schema", [k[1] for k in KEPT], ids=[k[0] for k in KEPT])
def test_what_no_exact_rewrite_exists_for_is_left_as_written(schema: Any) -> None:
    assert rewrite_schema(schema) is schema


def test_the_rewrite_is_pure_and_returns_an_unchanged_schema_itself() -> None:
    plain = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert rewrite_schema(plain) is plain
    assert rewrite_schema(True) is True
    schema = {"properties": {"x": {"allOf": [{"minimum": 1}, {"format": "date"}]}}}
    before = copy.deepcopy(schema)
    assert rewrite_schema(schema) != schema
    assert schema == before
    text = json.dumps(plain, separators=(",", ":"))
    assert rewritten_schema_text(text) == text


def test_a_rewritten_document_keeps_what_references_point_at() -> None:
    # The parent's definitions stay where they were, and merged references
    # inside the branches still resolve.
    schema = {
        "$defs": {
            "id": {"type": "integer", "minimum": 1},
            "base": {"properties": {"id": {"$ref": "#/$defs/id"}}},
        },
        "allOf": [{"$ref": "#/$defs/base"}, {"required": ["id"]}],
    }
    rewritten = assert_equivalent(schema, [{"id": 1}, {"id": 0}, {}, {"id": "x"}, 3])
    assert rewritten["properties"] == {"id": {"$ref": "#/$defs/id"}}
    assert rewritten["$defs"] == schema["$defs"]


def test_hostile_documents_are_served_as_written_quickly() -> None:
    # Each definition merges the next one twice: written out, the merged
    # schema would double at every level.
    defs = {
        f"d{i}": {
            "properties": {
                "x": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"title": "x"}]},
                "y": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"title": "y"}]},
            }
        }
        for i in range(40)
    }
    defs["d40"] = {"type": "integer"}
    growing = {"$defs": defs, "$ref": "#/$defs/d0"}
    # A chain of references far deeper than the rewrite follows.
    chain = {
        f"c{i}": {"allOf": [{"$ref": f"#/$defs/c{i + 1}"}, {"minimum": i}]} for i in range(300)
    }
    chain["c300"] = {"type": "integer"}
    deep = {"$defs": chain, "$ref": "#/$defs/c0"}
    for schema in (growing, deep):
        started = time.perf_counter()
        rewritten = rewrite_schema(schema)
        assert time.perf_counter() - started < 2.0
        assert len(json.dumps(rewritten)) < 4 * len(json.dumps(schema))


# --- the engines serve what they refused before ------------------------------------------

ALL_OF = {"allOf": [{"type": "integer"}, {"minimum": 2}]}
UNTYPED = {"type": "object", "properties": {"a": {"minimum": 2}}, "required": ["a"]}
DATED = {
    "type": "object",
    "properties": {"d": {"type": "string", "format": "date"}},
    "required": ["d"],
}
HOST = {"type": "string", "format": "hostname"}
# Four labels of 253 characters in all, and one more.
LONGEST_HOST = ".".join(["a" * 63] * 3 + ["b" * 61])
# xgrammar writes no number in this range: an empty rule, which accepted {"a":}.
TINY_RANGE = {
    "type": "object",
    "properties": {"a": {"type": "number", "minimum": 1e-10, "maximum": 2e-10}},
    "required": ["a"],
}


@pytest.mark.parametrize(
    ("schema", "engine", "valid", "invalid"),
    [
        (ALL_OF, EngineName.XGRAMMAR, "2", "1"),
        (ALL_OF, EngineName.XGRAMMAR, "7", '"x"'),
        # Its other types include any object: compact, xgrammar writes those with ", ".
        (UNTYPED, EngineName.LLGUIDANCE, '{"a":2}', '{"a":1}'),
        (UNTYPED, EngineName.LLGUIDANCE, '{"a":"x"}', "{}"),
        (DATED, EngineName.XGRAMMAR, '{"d":"2024-02-29"}', '{"d":"2023-02-29"}'),
        (TINY_RANGE, EngineName.LLGUIDANCE, '{"a":0.00000000015}', '{"a":}'),
        (TINY_RANGE, EngineName.LLGUIDANCE, '{"a":0.0000000002}', '{"a":0.000001}'),
        # xgrammar ignores a maxLength next to a pattern: llguidance serves host names.
        (HOST, EngineName.LLGUIDANCE, '"a-b.c--d"', '"ab--c.d"'),
        (HOST, EngineName.LLGUIDANCE, '"a1.b2-c"', '"a.-b"'),
        (HOST, EngineName.LLGUIDANCE, f'"{LONGEST_HOST}"', f'"{LONGEST_HOST}b"'),
    ],
)
def test_schemas_refused_before_are_served_and_enforced(
    routed: RoutedEngine, schema: Any, engine: EngineName, valid: str, invalid: str
) -> None:
    spec = compact_json_spec(schema)
    assert route(spec).engine is engine
    assert routed_accepts(routed, spec, valid)
    assert not routed_accepts(routed, spec, invalid)


@pytest.mark.parametrize("name", ["semver", "url", "topic", "non-blank", "int64"])
def test_a_format_2020_12_does_not_define_is_served_as_the_annotation_it_is(
    routed: RoutedEngine, name: str
) -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "format": name}}}
    # Refused before: neither engine enforces a format it does not know.
    assert [finding.keyword for finding in analyze(schema, XGRAMMAR)] == ["format"]
    assert rewrite_schema(schema) == {"type": "object", "properties": {"v": {"type": "string"}}}
    spec = compact_json_spec(schema)
    assert route(spec).engine is EngineName.XGRAMMAR
    assert routed_accepts(routed, spec, '{"v":"any text, 1.2"}')
    assert not routed_accepts(routed, spec, '{"v":1}')


@pytest.mark.parametrize("name", ["idn-hostname", "idn-email", "regex"])
def test_a_format_written_as_a_part_of_itself_is_served_and_refused_beside_a_pattern(
    name: str,
) -> None:
    # formats.py writes the ASCII names and the regular part of ECMA-262 patterns;
    # xgrammar ignores maxLength beside a pattern and writes quotes and backslashes
    # raw, so llguidance serves all three (test_format_patterns.py checks the values).
    assert route(compact_json_spec({"type": "string", "format": name})).engine is (
        EngineName.LLGUIDANCE
    )
    with pytest.raises(UnenforcedKeywordError, match=f"'format: {name}' at /format"):
        route(compact_json_spec({"type": "string", "format": name, "pattern": "^a"}))


def test_xgrammar_alone_now_serves_merged_and_split_schemas(
    small: SmallTokenizer, small_llguidance: LLGuidanceEngine
) -> None:
    forced = RoutedEngine(small.engine, small_llguidance, EngineSelection.XGRAMMAR)
    for schema, valid, invalid in ((ALL_OF, "3", "1"), (UNTYPED, '{"a":3}', '{"a":0}')):
        assert routed_accepts(forced, compact_json_spec(schema), valid)
        assert not routed_accepts(forced, compact_json_spec(schema), invalid)


def test_xgrammar_refuses_a_number_range_it_writes_as_nothing() -> None:
    # What it did: an empty rule where the number goes, so malformed JSON got through.
    assert accepts_text(compile_schema(TINY_RANGE), '{"a":}')
    with pytest.raises(UnenforcedKeywordError, match="'minimum' at /properties/a/minimum"):
        XGrammarEngine.check(compact_json_spec(TINY_RANGE))


@pytest.mark.parametrize(
    ("bounds", "empty"),
    [
        ({"minimum": 1e-10, "maximum": 2e-10}, True),
        ({"minimum": 1e-6, "maximum": 1e-6}, False),  # 0.000001 has six decimals
        ({"exclusiveMinimum": 0, "exclusiveMaximum": 1e-6}, True),
        ({"exclusiveMinimum": 0, "maximum": 1e-6}, False),
        ({"minimum": 0.1234567, "maximum": 0.1234568}, True),
        ({"minimum": 123456.1234567, "maximum": 123456.1234568}, True),
        ({"minimum": 0.1, "maximum": 0.1}, False),  # as written, not as the float 0.1
        ({"minimum": 1e-10}, False),  # open above
    ],
)
def test_calibration_the_ranges_xgrammar_writes_as_nothing(
    bounds: dict[str, Any], empty: bool
) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "number", **bounds}},
        "required": ["a"],
    }
    assert (unwritable_range(bounds, 6) is not None) is empty
    assert bool(analyze(schema, XGRAMMAR)) is empty
    assert accepts_text(compile_schema(schema), '{"a":}') is empty, "update number_fraction_digits"


def test_a_range_with_no_number_at_all_is_left_to_xgrammar_which_refuses_it() -> None:
    assert unwritable_range({"minimum": 3, "maximum": 2}, 6) is None
    assert unwritable_range({"exclusiveMinimum": 2, "maximum": 2}, 6) is None


def test_a_structural_tag_s_schemas_are_rewritten_too(small: SmallTokenizer) -> None:
    tag = {"structures": [{"begin": "<a>", "schema": ALL_OF, "end": "</a>"}], "triggers": ["<a>"]}
    spec = GrammarSpec.build(RequestKind.STRUCTURAL_TAG, tag, COMPACT)
    assert XGrammarEngine.check(spec) == ()
    assert route(spec).engine is EngineName.XGRAMMAR


def test_a_change_of_the_rewrite_changes_the_fingerprint(
    small: SmallTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = XGrammarEngine(small.engine._tokenizer_info, compile_threads=1).fingerprint
    monkeypatch.setattr(xgrammar_engine, "REWRITE_VERSION", "another rewrite")
    after = XGrammarEngine(small.engine._tokenizer_info, compile_threads=1).fingerprint
    assert before != after
