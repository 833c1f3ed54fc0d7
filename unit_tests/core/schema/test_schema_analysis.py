"""The unenforced-keyword analysis: per keyword, calibrated against xgrammar, and on the
official JSON-Schema-Test-Suite.

Three layers:

* unit cases: one schema per keyword or keyword value, with the findings it
  must produce (keyword and JSON pointer) or none;
* calibration: each claim of the xgrammar capability table, checked against
  the installed xgrammar (a witness value it wrongly accepts for every gap
  the table records, a value it rejects for what the table says it enforces),
  so a release that changes behaviour fails here;
* the suite (draft 2020-12, optional/ included): every schema the analysis
  lets through rejects every instance the suite marks invalid, and no
  schema vLLM's own xgrammar path gets right is refused without a reason.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from unit_tests.xgrammar_acceptance import accepted, accepts_text, compile_schema

from grammar_guard.core.engines.xgrammar.capabilities import (
    XGRAMMAR,
    XGRAMMAR_EXACT_FORMATS,
    XGRAMMAR_REGEX_FORMATS,
)
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.findings import Finding
from grammar_guard.core.schema.pointers import join_pointer
from grammar_guard.core.schema.regex_scan import pattern_problems

COMPACT = CompileOptions(any_whitespace=False)


def findings(schema: Any) -> set[tuple[str, str]]:
    return {(f.label, f.pointer) for f in analyze(schema, XGRAMMAR)}


# --- per keyword ----------------------------------------------------------------------

OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}}}

# (id, schema, expected findings as {(label, pointer)}; empty: enforced as written)
CASES: list[tuple[str, Any, set[tuple[str, str]]]] = [
    # annotations impose nothing
    (
        "annotations",
        {
            "type": "string",
            "title": "t",
            "description": "d",
            "default": "x",
            "examples": ["x"],
            "$comment": "c",
            "deprecated": True,
            "readOnly": True,
            "writeOnly": False,
            "contentMediaType": "text/plain",
            "contentEncoding": "base64",
            "x-vendor": {"anything": 1},
            "$schema": "https://json-schema.org/draft/2020-12/schema",
        },
        set(),
    ),
    ("true", True, set()),
    ("empty", {}, set()),
    # values that impose nothing
    ("uniqueItems false", {"type": "array", "uniqueItems": False}, set()),
    ("uniqueItems true", {"type": "array", "uniqueItems": True}, {("uniqueItems", "/uniqueItems")}),
    ("additionalProperties true", {**OBJECT, "additionalProperties": True}, set()),
    ("unevaluatedProperties true", {**OBJECT, "unevaluatedProperties": True}, set()),
    ("unevaluatedProperties false", {**OBJECT, "unevaluatedProperties": False}, set()),
    ("minLength 0 next to pattern", {"type": "string", "pattern": "^a$", "minLength": 0}, set()),
    ("not false", {"type": "integer", "not": False}, set()),
    ("not not anything", {"type": "integer", "not": {"not": {}}}, set()),
    ("if alone", {"type": "integer", "if": {"minimum": 3}}, set()),
    ("then without if", {"type": "integer", "then": {"minimum": 3}}, set()),
    ("empty dependentRequired", {**OBJECT, "dependentRequired": {"a": []}}, set()),
    ("contains with minContains 0", {"type": "array", "contains": {}, "minContains": 0}, set()),
    ("minContains without contains", {"type": "array", "minContains": 2}, set()),
    # formats: the ones xgrammar's regex gets exactly right pass
    *[
        (f"format {f}", {"type": "string", "format": f}, set())
        for f in sorted(XGRAMMAR_EXACT_FORMATS)
    ],
    *[
        (f"format {f}", {"type": "string", "format": f}, {(f"format: {f}", "/format")})
        for f in sorted(
            (XGRAMMAR_REGEX_FORMATS - XGRAMMAR_EXACT_FORMATS) | {"idn-email", "iri", "int32"}
        )
    ],
    (
        "format on a nested property",
        {"type": "object", "properties": {"email": {"type": "string", "format": "email"}}},
        {("format: email", "/properties/email/format")},
    ),
    ("format where no string can be", {"type": "integer", "format": "int64"}, set()),
    ("format without a type", {"format": "uuid"}, {("format: uuid", "/format")}),
    (
        "format shadows pattern",
        {"type": "string", "format": "uuid", "pattern": "^0"},
        {("pattern", "/pattern")},
    ),
    (
        "format shadows lengths",
        {"type": "string", "format": "uuid", "maxLength": 40},
        {("maxLength", "/maxLength")},
    ),
    (
        "pattern shadows lengths",
        {"type": "string", "pattern": "^a+$", "minLength": 2, "maxLength": 3},
        {("minLength", "/minLength"), ("maxLength", "/maxLength")},
    ),
    ("lengths alone", {"type": "string", "minLength": 2, "maxLength": 3}, set()),
    # patterns
    ("plain pattern", {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$"}, set()),
    ("unanchored pattern", {"type": "string", "pattern": "ab+"}, set()),
    ("anchors at the ends of alternatives", {"type": "string", "pattern": "^a$|^b|(c|^d)"}, set()),
    ("pattern with dot", {"type": "string", "pattern": "^.{1,5}$"}, set()),
    ("negated classes", {"type": "string", "pattern": '^[^x"\\\\]+\\d\\D\\W$'}, set()),
    ("class mixing a tab with a space", {"type": "string", "pattern": "^[\\t ]+$"}, set()),
    ("lookahead", {"type": "string", "pattern": "^(?=.*\\d).+$"}, {("pattern", "/pattern")}),
    ("negative lookahead", {"type": "string", "pattern": "^a(?!b)"}, {("pattern", "/pattern")}),
    ("inner anchor", {"type": "string", "pattern": "a^b"}, {("pattern", "/pattern")}),
    (
        "anchor in a repeated group",
        {"type": "string", "pattern": "(^a)+"},
        {("pattern", "/pattern")},
    ),
    ("\\S", {"type": "string", "pattern": "^\\S+$"}, {("pattern", "/pattern")}),
    ("[^\\s]", {"type": "string", "pattern": "^[^\\s]+$"}, {("pattern", "/pattern")}),
    ("a quote", {"type": "string", "pattern": '^a"b$'}, {("pattern", "/pattern")}),
    ("a backslash", {"type": "string", "pattern": "^a\\\\b$"}, {("pattern", "/pattern")}),
    ("a tab escape", {"type": "string", "pattern": "^a\\tb$"}, {("pattern", "/pattern")}),
    (
        "a class of control characters",
        {"type": "string", "pattern": "^[\\x00-\\x1f]$"},
        {("pattern", "/pattern")},
    ),
    (
        "a \\u escape of a quote",
        {"type": "string", "pattern": "^\\u0022$"},
        {("pattern", "/pattern")},
    ),
    # numbers
    ("bounds", {"type": "number", "minimum": 1.5, "exclusiveMaximum": 7}, set()),
    ("integer bounds", {"type": "integer", "exclusiveMinimum": -3, "maximum": 10}, set()),
    ("multipleOf unbounded", {"type": "integer", "multipleOf": 7}, set()),
    (
        "multipleOf bounded",
        {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 9999},
        set(),
    ),
    ("multipleOf 1", {"type": "integer", "multipleOf": 1, "minimum": 0}, set()),
    (
        "multipleOf half-bounded",
        {"type": "integer", "multipleOf": 7, "minimum": 0},
        {("multipleOf", "/multipleOf")},
    ),
    (
        "multipleOf wide range",
        {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 10000},
        {("multipleOf", "/multipleOf")},
    ),
    ("multipleOf large", {"type": "integer", "multipleOf": 1025}, {("multipleOf", "/multipleOf")}),
    (
        "multipleOf fractional",
        {"type": "integer", "multipleOf": 2.5},
        {("multipleOf", "/multipleOf")},
    ),
    (
        "multipleOf on number",
        {"type": "number", "multipleOf": 0.5},
        {("multipleOf", "/multipleOf")},
    ),
    ("typeless minimum", {"minimum": 3}, {("minimum", "/minimum")}),
    ("a bound a float rounds", {"type": "number", "maximum": 2**53 + 3}, {("maximum", "/maximum")}),
    ("a bound a float holds", {"type": "number", "maximum": 2**53}, set()),
    ("a wide integer bound", {"type": "integer", "maximum": 2**53 + 3}, set()),
    ("a const beyond 64 bits", {"const": 10**20 + 1}, {("const", "/const")}),
    ("an enum beyond 64 bits", {"enum": [1, [10**20 + 1]]}, {("enum", "/enum")}),
    # arrays
    (
        "arrays",
        {
            "type": "array",
            "prefixItems": [{"type": "string"}],
            "items": {"type": "integer"},
            "minItems": 1,
            "maxItems": 3,
        },
        set(),
    ),
    (
        "unevaluatedItems as items",
        {"type": "array", "prefixItems": [{"type": "string"}], "unevaluatedItems": False},
        set(),
    ),
    ("contains", {"type": "array", "contains": {"type": "integer"}}, {("contains", "/contains")}),
    (
        "maxContains",
        {"type": "array", "contains": {"const": 1}, "minContains": 0, "maxContains": 1},
        {("contains", "/contains")},
    ),
    (
        "additionalItems (draft 7)",
        {"type": "array", "additionalItems": False},
        {("additionalItems", "/additionalItems")},
    ),
    ("items implies an array", {"items": {"type": "integer"}, "minItems": 1}, set()),
    # objects
    (
        "object keywords",
        {
            **OBJECT,
            "required": ["a"],
            "minProperties": 1,
            "maxProperties": 2,
            "additionalProperties": {"type": "string"},
        },
        set(),
    ),
    (
        "properties imply an object",
        {"properties": {"a": {"type": "integer"}}, "required": ["a"]},
        set(),
    ),
    (
        "required outside properties",
        {**OBJECT, "required": ["a", "b"]},
        {("required: b", "/required/1")},
    ),
    (
        "required without properties",
        {"type": "object", "additionalProperties": True, "required": ["a"]},
        {("required: a", "/required/0")},
    ),
    (
        "dependentRequired",
        {**OBJECT, "dependentRequired": {"a": ["b"]}},
        {("dependentRequired", "/dependentRequired")},
    ),
    (
        "dependentSchemas",
        {**OBJECT, "dependentSchemas": {"a": {"required": ["b"]}}},
        {("dependentSchemas", "/dependentSchemas")},
    ),
    (
        "vacuous dependentSchemas",
        {**OBJECT, "dependentSchemas": {"a": {"properties": {"b": {}}}}},
        set(),
    ),
    (
        "dependencies (draft 7)",
        {**OBJECT, "dependencies": {"a": ["b"]}},
        {("dependencies", "/dependencies")},
    ),
    (
        "patternProperties alone",
        {"type": "object", "patternProperties": {"^x-": {"type": "string"}}},
        set(),
    ),
    (
        "patternProperties next to properties",
        {**OBJECT, "patternProperties": {"^a": {"type": "string"}}},
        {("patternProperties", "/patternProperties")},
    ),
    (
        "two patternProperties",
        {"type": "object", "patternProperties": {"^a": {}, "b$": {}}},
        {("patternProperties", "/patternProperties")},
    ),
    (
        "a patternProperties regex",
        {"type": "object", "patternProperties": {"a(?=b)": {}}},
        {("patternProperties", "/patternProperties/a(?=b)")},
    ),
    ("propertyNames alone", {"type": "object", "propertyNames": {"maxLength": 3}}, set()),
    ("propertyNames enum", {"type": "object", "propertyNames": {"enum": ["a", "b"]}}, set()),
    (
        # "a" may not be in the object: xgrammar would still write it.
        "propertyNames refusing a listed name",
        {**OBJECT, "propertyNames": {"minLength": 3}},
        {("propertyNames", "/propertyNames")},
    ),
    (
        "propertyNames undecided for a listed name",
        {**OBJECT, "$defs": {"n": {}}, "propertyNames": {"$ref": "#/$defs/n"}},
        {("propertyNames", "/propertyNames")},
    ),
    # Each listed name passes: only the names an object adds are checked.
    (
        "propertyNames passing the listed names",
        {**OBJECT, "propertyNames": {"maxLength": 3}},
        set(),
    ),
    (
        "propertyNames {}",
        {"type": "object", "propertyNames": {}},
        {("propertyNames", "/propertyNames")},
    ),
    (
        "propertyNames pattern and length",
        {"type": "object", "propertyNames": {"pattern": "^a+$", "maxLength": 2}},
        {("maxLength", "/propertyNames/maxLength")},
    ),
    (
        "propertyNames with no additional",
        {"type": "object", "propertyNames": {"maxLength": 3}, "additionalProperties": False},
        {("additionalProperties", "/additionalProperties")},
    ),
    (
        "non-ASCII name next to additional",
        {"type": "object", "properties": {"ü": {"type": "integer"}}, "additionalProperties": True},
        {("properties: ü", "/properties/ü")},
    ),
    (
        "non-ASCII name, closed object",
        {"type": "object", "properties": {"ü": {"type": "integer"}}},
        set(),
    ),
    (
        "names JSON escapes next to additional",
        {
            "type": "object",
            "properties": {"a\nb": {"type": "number"}, 'a"b': {}, "a/b": {}},
            "additionalProperties": {"type": "string"},
        },
        {("properties: a\nb", "/properties/a\nb"), ('properties: a"b', '/properties/a"b')},
    ),
    (
        "pointer escaping",
        {"type": "object", "properties": {"a/b~c": {"type": "string", "format": "date"}}},
        {("format: date", "/properties/a~1b~0c/format")},
    ),
    # applicators
    ("not", {"type": "integer", "not": {"const": 3}}, {("not", "/not")}),
    (
        "if/then/else",
        {"type": "integer", "if": {"minimum": 3}, "then": {"maximum": 5}, "else": {"const": 0}},
        {("if", "/if"), ("then", "/then"), ("else", "/else")},
    ),
    ("allOf of one", {"allOf": [{"type": "integer", "minimum": 2}]}, set()),
    ("allOf of two", {"allOf": [{"type": "integer"}, {"minimum": 2}]}, {("allOf", "/allOf")}),
    (
        "allOf with a sibling",
        {"allOf": [{"type": "integer"}], "maximum": 3},
        {("maximum", "/maximum")},
    ),
    ("anyOf", {"anyOf": [{"type": "integer", "minimum": 2}, {"type": "null"}]}, set()),
    (
        "anyOf with a redundant type",
        {"type": ["integer", "null"], "anyOf": [{"type": "integer"}, {"type": "null"}]},
        set(),
    ),
    (
        "anyOf with a sibling",
        {"type": "string", "anyOf": [{"maxLength": 2}, {"minLength": 4}]},
        {
            ("type", "/type"),
            ("maxLength", "/anyOf/0/maxLength"),
            ("minLength", "/anyOf/1/minLength"),
        },
    ),
    ("oneOf of types", {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 3}]}, set()),
    (
        "oneOf of integer and number",
        {"oneOf": [{"type": "integer"}, {"type": "number"}]},
        {("oneOf", "/oneOf")},
    ),
    ("oneOf of consts", {"oneOf": [{"const": 1}, {"const": "1"}, {"enum": [2, None]}]}, set()),
    ("oneOf of equal numbers", {"oneOf": [{"const": 1}, {"const": 1.0}]}, {("oneOf", "/oneOf")}),
    (
        "oneOf with a discriminator",
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
                    "required": ["kind"],
                    "additionalProperties": True,
                },
                {
                    "type": "object",
                    "properties": {"kind": {"enum": ["b", "c"]}},
                    "required": ["kind"],
                    "additionalProperties": True,
                },
            ]
        },
        set(),
    ),
    (
        "oneOf of closed objects",
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {}}, "required": ["b"]},
            ]
        },
        set(),
    ),
    (
        "oneOf of open objects",
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"a": {}},
                    "required": ["a"],
                    "additionalProperties": True,
                },
                {"type": "object", "properties": {"b": {}}, "required": ["b"]},
            ]
        },
        {("oneOf", "/oneOf")},
    ),
    ("enum with its type", {"type": "string", "enum": ["a", "b"]}, set()),
    (
        # What vLLM sends for tool_choice="required": "type" next to anyOf, whose
        # untyped branches xgrammar still builds as objects only.
        "vLLM's tool_choice=required schema",
        {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "anyOf": [
                    {
                        "properties": {
                            "name": {"type": "string", "enum": [name]},
                            "parameters": {
                                "type": "object",
                                "properties": {"q": {"type": "string"}},
                            },
                        },
                        "required": ["name", "parameters"],
                    }
                    for name in ("search", "lookup")
                ],
            },
        },
        set(),
    ),
    (
        "enum with a value of another type",
        {"type": "string", "enum": ["a", None]},
        {("type", "/type")},
    ),
    ("const and a bound it meets", {"const": 3, "minimum": 1, "multipleOf": 3}, set()),
    ("const and a bound it breaks", {"const": 3, "maximum": 1}, {("maximum", "/maximum")}),
    ("enum and a pattern", {"enum": ["a"], "pattern": "^a$"}, {("pattern", "/pattern")}),
    # references
    ("local $ref", {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}, set()),
    (
        "definitions",
        {
            "definitions": {"n": {"type": "integer"}},
            "properties": {"a": {"$ref": "#/definitions/n"}},
        },
        set(),
    ),
    (
        "findings inside a definition",
        {"$defs": {"n": {"not": {}}}, "items": {"$ref": "#/$defs/n"}},
        {("not", "/$defs/n/not")},
    ),
    ("an unused definition", {"$defs": {"n": {"not": {}}}, "type": "integer"}, set()),
    (
        "recursion",
        {
            "$defs": {
                "t": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                }
            },
            "$ref": "#/$defs/t",
        },
        set(),
    ),
    (
        "root recursion",
        {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"$ref": "#"}]}},
        set(),
    ),
    (
        "$ref sibling",
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "minimum": 3},
        {("minimum", "/minimum")},
    ),
    (
        "$ref with a redundant type",
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "type": "number"},
        set(),
    ),
    (
        "remote $ref",
        {"$ref": "http://localhost:1234/integer.json"},
        {("$ref: http://localhost:1234/integer.json", "/$ref")},
    ),
    (
        "anchor $ref",
        {"$defs": {"n": {"$anchor": "n", "type": "integer"}}, "$ref": "#n"},
        {("$ref: #n", "/$ref")},
    ),
    (
        "escaped pointer",
        {"$defs": {"a/b": {"type": "integer"}}, "$ref": "#/$defs/a~1b"},
        {("$ref: #/$defs/a~1b", "/$ref")},
    ),
    (
        "$ref inside an embedded resource",
        {
            "$defs": {
                "r": {"$id": "http://x/r", "$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"}
            },
            "$ref": "#/$defs/r",
        },
        {("$ref: #/$defs/s", "/$defs/r/$ref")},
    ),
    (
        "$dynamicRef",
        {"$dynamicRef": "#/$defs/n", "$defs": {"n": {"type": "integer"}}},
        {("$dynamicRef", "/$dynamicRef")},
    ),
    # Unknown keywords are annotations in draft 2020-12 (draft-04's "id",
    # Snowplow's "self", typos alike): nothing was asked, nothing is dropped.
    ("unknown keyword", {"type": "integer", "maximun": 3, "self": {"vendor": "x"}}, set()),
    (
        "an unknown keyword holding referenced schemas",
        {"my-defs": {"n": {"type": "integer"}}, "items": {"$ref": "#/my-defs/n"}},
        set(),
    ),
]


@pytest.mark.parametrize(("schema", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_findings_per_keyword(schema: Any, expected: set[tuple[str, str]]) -> None:
    assert findings(schema) == expected


def test_a_finding_says_what_and_where() -> None:
    (finding,) = analyze(
        {"type": "object", "properties": {"e": {"type": "string", "format": "email"}}}, XGRAMMAR
    )
    assert finding.keyword == "format" and finding.value == "email"
    assert finding.pointer == "/properties/e/format"
    assert finding.describe() == "'format: email' at /properties/e/format"
    assert finding.metric_keyword == "format"
    assert finding.reason


def test_metric_labels_are_keywords_never_client_text() -> None:
    assert Finding("not", "/not").metric_keyword == "not"
    assert Finding("whatever-a-client-sends", "/x").metric_keyword == "unknown"


def test_base_pointer_prefixes_every_location() -> None:
    (finding,) = analyze({"not": {}}, XGRAMMAR, base_pointer="/format/content/json_schema")
    assert finding.pointer == "/format/content/json_schema/not"


def test_pointer_helpers() -> None:
    assert join_pointer("/a", "b/c", "d~e", 3) == "/a/b~1c/d~0e/3"


def test_a_long_ref_chain_needs_no_recursion() -> None:
    chain = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(5000)}
    chain["d5000"] = {"not": {}}
    result = analyze({"$defs": chain, "$ref": "#/$defs/d0"}, XGRAMMAR)
    assert [(f.keyword, f.pointer) for f in result] == [("not", "/$defs/d5000/not")]


def test_hostile_schemas_stay_cheap() -> None:
    # Branches that reference branches, a wide oneOf, a long enum, a deep pattern.
    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 20} for i in range(200)}
    defs["d200"] = {"type": "integer"}
    wide = {"oneOf": [{"const": i} for i in range(2000)]}
    schema = {
        "$defs": defs,
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/d0"},
            "b": wide,
            "c": {"type": "integer", "enum": list(range(20000))},
            "d": {"type": "string", "pattern": "(" * 5000 + ")" * 5000},
            "e": {
                "type": "array",
                "items": {"enum": [[i, i] for i in range(3000)]},
                "uniqueItems": False,
            },
        },
    }
    started = time.perf_counter()
    result = analyze(schema, XGRAMMAR)
    assert time.perf_counter() - started < 2.0
    assert {f.pointer for f in result} == {"/properties/b/oneOf", "/properties/d/pattern"}


# --- structural tags and the engine --------------------------------------------------


def test_every_schema_in_a_structural_tag_is_analysed_with_its_pointer() -> None:
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<f"],
            "tags": [
                {"type": "tag", "begin": "<f1>", "end": "</f1>",
                 "content": {"type": "json_schema",
                             "json_schema": {"type": "number", "not": {"type": "integer"}}}},
                {"type": "tag", "begin": "<f2>", "end": "</f2>",
                 "content": {"type": "json_schema", "any_order": True, "json_schema": {
                     "type": "object", "properties": {"a": {}}, "required": ["a"]}}},
                {"type": "tag", "begin": "<f3>", "end": "</f3>",
                 "content": {"type": "json_schema", "excludes": ["x"], "json_schema": {
                     "type": "string", "maxLength": 3}}},
            ],
        },
    }  # fmt: skip
    spec = GrammarSpec.build(RequestKind.STRUCTURAL_TAG, tag, COMPACT)
    with pytest.raises(InvalidGrammarError) as refused:
        XGrammarEngine.check(spec)
    base = "/format/tags"
    assert [(f.label, f.pointer) for f in refused.value.findings] == [  # type: ignore[attr-defined]
        ("not", f"{base}/0/content/json_schema/not"),
        ("required: a", f"{base}/1/content/json_schema/required/0"),
        ("maxLength", f"{base}/2/content/json_schema/maxLength"),
    ]


def test_a_legacy_structural_tag_points_into_its_structures() -> None:
    structure = {"begin": "<a>", "schema": {"type": "array", "uniqueItems": True}, "end": "</a>"}
    tag = {"structures": [structure], "triggers": ["<a"]}
    spec = GrammarSpec.build(RequestKind.STRUCTURAL_TAG, tag, COMPACT)
    with pytest.raises(
        InvalidGrammarError, match=r"'uniqueItems' at /structures/0/schema/uniqueItems"
    ):
        XGrammarEngine.check(spec)


# --- calibration: the table against the installed xgrammar --------------------------


def xgrammar_accepts(schema: Any, text: str) -> bool:
    return accepts_text(compile_schema(schema), text)


# (what the table claims, schema, a text that is invalid for the schema): xgrammar
# accepts each text, which is why the analysis reports the keyword.
GAPS: list[tuple[str, Any, str]] = [
    ("not", {"type": "integer", "not": {"const": 1}}, "1"),
    ("if/then", {"type": "integer", "if": {"minimum": 2}, "then": {"const": 5}}, "3"),
    (
        "dependentRequired",
        {"type": "object", "additionalProperties": True, "dependentRequired": {"a": ["b"]}},
        '{"a":1}',
    ),
    (
        "dependentSchemas",
        {
            "type": "object",
            "additionalProperties": True,
            "dependentSchemas": {"a": {"required": ["b"]}},
        },
        '{"a":1}',
    ),
    ("uniqueItems", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1,1]"),
    ("contains", {"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}}, "[2]"),
    ("$dynamicRef", {"$dynamicRef": "#/$defs/n", "$defs": {"n": {"type": "integer"}}}, '"x"'),
    ("remote $ref", {"$ref": "http://localhost:1234/integer.json"}, '"x"'),
    ("anchor $ref", {"$defs": {"n": {"$anchor": "n", "type": "integer"}}, "$ref": "#n"}, '"x"'),
    (
        "$ref siblings",
        {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "minimum": 5},
        "1",
    ),
    ("const siblings", {"const": "a", "type": "integer"}, '"a"'),
    ("enum siblings", {"enum": [1, "a"], "type": "string"}, "1"),
    ("anyOf siblings", {"type": "string", "anyOf": [{"type": "string"}, {"type": "integer"}]}, "3"),
    ("allOf of two", {"allOf": [{"type": "integer"}, {"minimum": 2}]}, '"x"'),
    ("oneOf overlap", {"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1"),
    ("typeless keywords", {"minimum": 2}, "1"),
    (
        "required outside properties",
        {"type": "object", "properties": {"a": {}}, "required": ["a", "b"]},
        '{"a":1}',
    ),
    ("multipleOf above 1024", {"type": "integer", "multipleOf": 1025}, "1"),
    ("multipleOf half-bounded", {"type": "integer", "multipleOf": 3, "minimum": 0}, "4"),
    (
        "multipleOf wide range",
        {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 10000},
        "8",
    ),
    ("multipleOf fractional", {"type": "integer", "multipleOf": 2.5}, "4"),
    ("multipleOf on number", {"type": "number", "multipleOf": 2}, "3"),
    ("a bound rounded outward", {"type": "number", "maximum": 2**53 + 3}, str(2**53 + 4)),
    ("a const beyond 64 bits", {"const": 10**20 + 1}, "1e+20"),
    (
        "format shadows pattern",
        {"type": "string", "format": "uuid", "pattern": "^0"},
        '"1eb8aa08-aa98-11ea-b4aa-73b441d16380"',
    ),
    (
        "format shadows maxLength",
        {"type": "string", "format": "uuid", "maxLength": 3},
        '"1eb8aa08-aa98-11ea-b4aa-73b441d16380"',
    ),
    ("pattern shadows maxLength", {"type": "string", "pattern": "^a+$", "maxLength": 2}, '"aaaa"'),
    ("unknown format", {"type": "string", "format": "int32"}, '"x"'),
    ("format date", {"type": "string", "format": "date"}, '"2021-02-29"'),
    ("format date-time", {"type": "string", "format": "date-time"}, '"2020-04-31T00:00:00Z"'),
    ("format time", {"type": "string", "format": "time"}, '"22:59:60Z"'),
    ("format email", {"type": "string", "format": "email"}, '"\\"a\\"b\\"@example.com"'),
    ("format hostname", {"type": "string", "format": "hostname"}, '"' + "a" * 64 + '.com"'),
    ("format ipv6", {"type": "string", "format": "ipv6"}, '"::ffff:192.168.0.01"'),
    ("format json-pointer", {"type": "string", "format": "json-pointer"}, '"/a\\u007e"'),
    (
        "format relative-json-pointer",
        {"type": "string", "format": "relative-json-pointer"},
        '"0/a\\u007e"',
    ),
    ("pattern lookahead", {"type": "string", "pattern": "^a(?=c).$"}, '"ab"'),
    ("pattern inner anchor", {"type": "string", "pattern": "a^b"}, '"ab"'),
    ("pattern \\S", {"type": "string", "pattern": "^\\S$"}, '"\u00a0"'),
    ("pattern quote", {"type": "string", "pattern": '^["]$'}, '"""'),
    (
        "patternProperties next to properties",
        {
            "type": "object",
            "properties": {"ab": {"type": "string"}},
            "patternProperties": {"^a": {"type": "integer"}},
        },
        '{"ab":"x"}',
    ),
    (
        "two patternProperties",
        {
            "type": "object",
            "patternProperties": {"^a.*$": {"type": "integer"}, "^.*b$": {"type": "string"}},
        },
        '{"ab":1}',
    ),
    (
        "propertyNames next to properties",
        {"type": "object", "properties": {"x": {}}, "propertyNames": {"pattern": "^a+$"}},
        '{"x":1}',
    ),
    (
        "propertyNames with no additional",
        {"type": "object", "propertyNames": {"maxLength": 2}, "additionalProperties": False},
        '{"a":1}',
    ),
    ("propertyNames {}", {"type": "object", "propertyNames": {}}, "{1:1}"),
    (
        "non-ASCII names and additional",
        {"type": "object", "properties": {"ü": {"type": "integer"}}, "additionalProperties": True},
        '{"ü":"x"}',
    ),
    (
        "names JSON escapes and additional",
        {
            "type": "object",
            "properties": {"a\nb": {"type": "number"}, 'a"b': {"type": "number"}},
            "additionalProperties": {"type": "string"},
        },
        '{"a\\nb":"1","a\\"b":"1"}',
    ),
]


@pytest.mark.parametrize(("schema", "text"), [g[1:] for g in GAPS], ids=[g[0] for g in GAPS])
def test_calibration_xgrammar_accepts_what_the_table_says_it_does_not_enforce(
    schema: Any, text: str
) -> None:
    assert analyze(schema, XGRAMMAR), "the analysis must report this schema"
    assert xgrammar_accepts(schema, text), "xgrammar enforces this now: update the table"


# (what the table claims is enforced, schema, an invalid text xgrammar rejects)
ENFORCED: list[tuple[str, Any, str]] = [
    ("multipleOf unbounded", {"type": "integer", "multipleOf": 1024}, "1023"),
    (
        "multipleOf in 10000 integers",
        {"type": "integer", "multipleOf": 7, "minimum": 0, "maximum": 9999},
        "8",
    ),
    ("number bounds", {"type": "number", "exclusiveMinimum": 1.1}, "1.1"),
    ("integer bounds", {"type": "integer", "minimum": -2, "maximum": 3}, "4"),
    ("lengths count code points", {"type": "string", "maxLength": 1}, '"ab"'),
    (
        "prefixItems and items",
        {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "integer"}},
        '["a","b"]',
    ),
    ("maxItems", {"type": "array", "items": {}, "maxItems": 1}, "[1,2]"),
    ("required", {"type": "object", "properties": {"a": {}}, "required": ["a"]}, "{}"),
    (
        "min/maxProperties",
        {"type": "object", "additionalProperties": True, "maxProperties": 1},
        '{"a":1,"b":2}',
    ),
    (
        "additionalProperties schema",
        {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
        '{"a":1,"b":"x"}',
    ),
    ("propertyNames", {"type": "object", "propertyNames": {"pattern": "^a+$"}}, '{"ab":1}'),
    (
        "patternProperties",
        {"type": "object", "patternProperties": {"^a": {"type": "integer"}}},
        '{"a":"x"}',
    ),
    (
        "unevaluatedProperties",
        {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": {"type": "string"}},
        '{"a":1,"b":1}',
    ),
    (
        "oneOf of closed objects",
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {}}, "required": ["b"]},
            ]
        },
        '{"a":1,"b":1}',
    ),
    ("negated class keeps JSON specials out", {"type": "string", "pattern": "^[^a]$"}, '"""'),
    (
        "a class with plain characters keeps JSON specials out",
        {"type": "string", "pattern": "^[\\t ]$"},
        '"\t"',
    ),
    *[
        (f"format {name}", {"type": "string", "format": name}, text)
        for name, text in [
            ("uuid", '"2eb8aa08-aa98-11ea-b4aa-73b441d1638"'),
            ("ipv4", '"256.1.1.1"'),
            ("duration", '"P1Y2"'),
            ("uri", '"//no-scheme"'),
            ("uri-reference", '"\\\\\\\\WINDOWS"'),
            ("uri-template", '"{a"'),
        ]
    ],
]


@pytest.mark.parametrize(
    ("schema", "text"), [e[1:] for e in ENFORCED], ids=[e[0] for e in ENFORCED]
)
def test_calibration_xgrammar_rejects_what_the_table_says_it_enforces(
    schema: Any, text: str
) -> None:
    assert not analyze(schema, XGRAMMAR), "the analysis must let this schema through"
    assert not xgrammar_accepts(schema, text), "xgrammar no longer enforces this: update the table"


def test_calibration_pattern_reader_matches_the_table() -> None:
    support = XGRAMMAR.pattern
    assert pattern_problems("^[a-z]{2,}\\d*$", support) == []
    assert len(pattern_problems('(?=a)a^b\\S"', support)) == 4


# --- random schemas -------------------------------------------------------------------


class _RandomSchemas:
    """Random schemas over the keywords xgrammar handles (and some it does not), and values."""

    NAMES = ("a", "b", "c", "ab", "k", "ü")
    PATTERNS = ("^a+$", "^[a-c]{1,3}$", "b", "^(ab|cd)*$", "^\\d{2}$", "^[^x]*$", "a|^b", "^\\S+$")
    FORMATS = ("email", "uuid", "ipv4", "date", "duration", "uri", "int32")
    VALUES = (0, 1, 2, 3, -1, 10, 1.5, 0.5, "", "a", "aa", "ab", "b", "x", "12", "a\u00a0b",
              "joe@x.com", "2021-02-29", "P1D", "1.1.1.1", None, True, False)  # fmt: skip

    def __init__(self, seed: int) -> None:
        import random

        self.r = random.Random(seed)

    def leaf(self) -> dict[str, Any]:
        r = self.r
        kind = r.choice(["integer", "number", "string", "boolean", "null", None])
        schema: dict[str, Any] = {"type": kind} if kind else {}
        if kind in ("integer", "number") or (kind is None and r.random() < 0.2):
            for key in r.sample(["minimum", "maximum", "exclusiveMinimum", "multipleOf"], 2):
                if r.random() < 0.5:
                    schema[key] = (
                        r.choice([2, 3, 0.5])
                        if key == "multipleOf"
                        else r.choice([-2, 0, 1, 3, 10])
                    )
        if kind == "string" or (kind is None and r.random() < 0.2):
            for key in r.sample(["minLength", "maxLength", "pattern", "format"], 2):
                if r.random() < 0.5:
                    schema[key] = {
                        "minLength": r.randint(0, 3),
                        "maxLength": r.randint(1, 4),
                        "pattern": r.choice(self.PATTERNS),
                        "format": r.choice(self.FORMATS),
                    }[key]
        if r.random() < 0.15:
            schema["enum"] = r.sample([1, 2, "a", "b", None, True, 1.5], r.randint(1, 3))
        return schema

    def schema(self, depth: int = 0) -> Any:
        r = self.r
        roll = r.random()
        if depth > 2 or roll < 0.35:
            return self.leaf()
        if roll < 0.55:
            names = r.sample(self.NAMES, r.randint(0, 3))
            obj: dict[str, Any] = {"type": "object"} if r.random() < 0.8 else {}
            obj["properties"] = {name: self.schema(depth + 1) for name in names}
            if names and r.random() < 0.6:
                obj["required"] = r.sample([*names, "zz"], r.randint(1, len(names)))
            if r.random() < 0.4:
                obj["additionalProperties"] = r.choice([True, False, self.schema(depth + 1)])
            if r.random() < 0.2:
                obj[r.choice(["minProperties", "maxProperties"])] = r.randint(0, 3)
            if r.random() < 0.1:
                obj["patternProperties"] = {r.choice(["^a", "b$"]): self.schema(depth + 1)}
            if r.random() < 0.1:
                obj["propertyNames"] = r.choice([{"maxLength": 1}, {"enum": ["a", "b"]}, {}])
            return obj
        if roll < 0.7:
            arr: dict[str, Any] = {"type": "array"} if r.random() < 0.8 else {}
            if r.random() < 0.7:
                arr["items"] = self.schema(depth + 1)
            if r.random() < 0.3:
                arr["prefixItems"] = [self.schema(depth + 1) for _ in range(r.randint(1, 2))]
            for key in ("minItems", "maxItems", "uniqueItems", "contains"):
                if r.random() < 0.2:
                    choices = {
                        "minItems": r.randint(0, 2),
                        "maxItems": r.randint(1, 3),
                        "uniqueItems": r.random() < 0.5,
                        "contains": self.leaf(),
                    }
                    arr[key] = choices[key]
            return arr
        if roll < 0.8:
            variants = []
            for tag in r.sample(["x", "y", 1], 2):
                properties = {"k": {"const": tag}, r.choice(self.NAMES): self.leaf()}
                required = ["k"] if r.random() < 0.8 else []
                variants.append({"type": "object", "properties": properties, "required": required})
            return {"oneOf": variants}
        keyword = r.choice(["anyOf", "oneOf", "allOf", "not", "$ref"])
        if keyword == "$ref":
            return {"$ref": "#/$defs/x"}
        if keyword == "not":
            return {"not": self.schema(depth + 1), **self.leaf()}
        return {keyword: [self.schema(depth + 1) for _ in range(self.r.randint(1, 3))]}

    def value(self, depth: int = 0) -> Any:
        r = self.r
        roll = r.random()
        if depth > 2 or roll < 0.5:
            return r.choice(self.VALUES)
        if roll < 0.75:
            return [self.value(depth + 1) for _ in range(r.randint(0, 3))]
        keys = r.sample([*self.NAMES, "zz"], r.randint(0, 3))
        return {key: self.value(depth + 1) for key in keys} | (
            {"k": r.choice(["x", "y", 1])} if r.random() < 0.3 else {}
        )

    def instance(self, schema: Any, depth: int = 0) -> Any:
        r = self.r
        if not isinstance(schema, dict) or depth > 4 or r.random() < 0.25:
            return self.value(depth)
        if "enum" in schema:
            return r.choice(schema["enum"])
        for keyword in ("anyOf", "oneOf", "allOf"):
            if keyword in schema:
                return self.instance(r.choice(schema[keyword]), depth + 1)
        if "properties" in schema:
            out = {
                k: self.instance(v, depth + 1)
                for k, v in schema["properties"].items()
                if r.random() < 0.7
            }
            return out | ({r.choice(self.NAMES): self.value(depth + 1)} if r.random() < 0.3 else {})
        if "items" in schema or "prefixItems" in schema:
            head = [self.instance(item, depth + 1) for item in schema.get("prefixItems", [])]
            return head + [
                self.instance(schema.get("items", {}), depth + 1) for _ in range(r.randint(0, 3))
            ]
        return self.value(depth)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_schemas_the_analysis_passes_reject_what_jsonschema_rejects(seed: int) -> None:
    """A differential check: for random schemas the analysis lets through, xgrammar accepts
    no value the ``jsonschema`` validator finds invalid, in any plausible serialisation."""
    import jsonschema

    random_schemas = _RandomSchemas(seed)
    passed = checked = 0
    leaks = []
    for _ in range(150):
        schema = random_schemas.schema()
        if random_schemas.r.random() < 0.5:
            schema = (
                {**schema, "$defs": {"x": random_schemas.schema(1)}}
                if isinstance(schema, dict)
                else schema
            )
        if analyze(schema, XGRAMMAR):
            continue
        try:
            compiled = compile_schema(schema)
            validator = jsonschema.Draft202012Validator(
                schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
            )
        except Exception:
            continue
        passed += 1
        for _ in range(30):
            value = random_schemas.instance(schema)
            try:
                valid = validator.is_valid(value)
            except RecursionError:
                break  # a reference to itself and nothing else: the oracle cannot tell
            if valid:
                continue
            checked += 1
            if accepted(compiled, value):
                leaks.append(f"{json.dumps(schema)}: {value!r}")
    assert passed > 40 and checked > 400
    assert not leaks, "\n".join(leaks)
