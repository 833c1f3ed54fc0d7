"""Schemas in the shapes of real-world collections the shared data lacks: served or refused.

Kubernetes (int-or-string, ``x-kubernetes-*``), JSON Schema Store (draft-04
booleans, ``dependencies``, ``propertyNames``, lookaheads, ``not`` of a
pattern) and hand-written API schemas (``oneOf`` of formats, of a named value
and a pattern). Each served one is served by routing as a request's schema
is; that each rewrite behind them accepts exactly what the schema accepts is
property-tested in its own file. Each refused one needs what neither engine
enforces (``uniqueItems`` over strings, a back reference, a remote ``$ref``,
branches that really overlap), and is refused rather than served loose.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from unit_tests.conftest import compact_json_spec

from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import InvalidGrammarError

SERVED: dict[str, Any] = {
    "k8s-intorstr": {
        "type": "object",
        "properties": {
            "port": {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            },
            "replicas": {"type": "integer", "format": "int32"},
            "size": {"type": "integer", "format": "int64"},
            "data": {"type": "string", "format": "byte"},
        },
        "x-kubernetes-group-version-kind": [
            {"group": "apps", "kind": "Deployment", "version": "v1"}
        ],
    },
    "k8s-labels": {
        "type": "object",
        "properties": {
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "creationTimestamp": {"type": "string", "format": "date-time"},
            "quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        },
    },
    "k8s-preserve": {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    },
    "d4-exclusive-bool": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "p": {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1}
        },
    },
    "d4-id": {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/x.json",
        "type": "object",
        "definitions": {"a": {"type": "string"}},
        "properties": {"a": {"$ref": "#/definitions/a"}},
    },
    "dependencies-arr": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "dependencies": {"a": ["b"]},
    },
    "dependencies-schema": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "dependencies": {"a": {"required": ["b"]}},
    },
    "not-required": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "not": {"required": ["a", "b"]},
    },
    "not-anyof-required": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "not": {"anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    },
    "not-null": {"type": "object", "properties": {"a": {"not": {"type": "null"}}}},
    "not-enum": {
        "type": "object",
        "properties": {"a": {"type": "string", "not": {"enum": ["x", "y"]}}},
    },
    "propnames-pattern": {
        "type": "object",
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": "string"},
    },
    "propnames-maxlen": {
        "type": "object",
        "propertyNames": {"maxLength": 10},
        "additionalProperties": {"type": "integer"},
    },
    "propnames-enum": {"type": "object", "propertyNames": {"enum": ["a", "b"]}},
    "pattern-lookahead": {"type": "string", "pattern": "^(?!.*\\.\\.)[a-z.]+$"},
    "pattern-unicode-prop": {"type": "string", "pattern": "^\\p{L}+$"},
    "pattern-digits": {"type": "string", "pattern": "^\\d{3}-\\w+$"},
    "pattern-unanchored": {"type": "string", "pattern": "[a-z]"},
    "pattern-dollar-brace": {"type": "string", "pattern": "^\\$\\{.+\\}$"},
    "pattern-uescape": {"type": "string", "pattern": "^[\\u0041-\\u005A]+$"},
    "pattern-inline-flag": {"type": "string", "pattern": "(?i)^abc$"},
    "tuple-d7": {
        "type": "array",
        "items": [{"type": "string"}, {"type": "integer"}],
        "additionalItems": False,
    },
    "tuple-d7-open": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
    "ref-root": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
    },
    "allof-ref-ext": {
        "definitions": {
            "base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
        },
        "allOf": [{"$ref": "#/definitions/base"}, {"properties": {"x": {"type": "integer"}}}],
    },
    "if-then": {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "x": {"type": "string"}},
        "if": {"properties": {"kind": {"const": "a"}}},
        "then": {"required": ["x"]},
    },
    "oneof-required": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    "anyof-required": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    "pp-beside-props": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {"^x-": {}},
        "additionalProperties": False,
    },
    "minmaxprops": {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "minProperties": 1,
        "maxProperties": 3,
    },
    "contains": {"type": "array", "items": {"type": "string"}, "contains": {"const": "x"}},
    "format-uri-ref": {
        "type": "object",
        "properties": {
            "u": {"type": "string", "format": "uri-reference"},
            "r": {"type": "string", "format": "regex"},
            "c": {"type": "string", "format": "color"},
        },
    },
    "type-null-union": {"type": ["string", "null"], "enum": ["a", "b", None]},
    "multipleOf-float": {"type": "number", "multipleOf": 0.01, "minimum": 0},
    "dyn": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "$schema": {"type": "string"},
            "version": {"type": "string", "pattern": "^\\d+\\.\\d+(\\.\\d+)?$"},
        },
        "required": ["version"],
        "additionalProperties": False,
    },
    "ref-with-sibling": {
        "definitions": {"s": {"type": "string"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/s", "description": "x", "default": "q"}},
    },
    "ref-sibling-constraint": {
        "definitions": {"s": {"type": "string"}},
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/s", "maxLength": 5}},
    },
    "not-const": {"type": "string", "not": {"const": ""}},
    "not-pattern": {"type": "string", "not": {"pattern": "^x"}},
    "not-type-arr": {"not": {"type": ["string", "number"]}},
    "anyof-type-bound": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]},
    "pattern-props-only": {
        "type": "object",
        "patternProperties": {"^[a-z]+$": {"type": "integer"}},
        "additionalProperties": False,
    },
    "const-obj": {"const": {"a": 1}},
    "enum-objs": {"enum": [{"a": 1}, [1, 2], "x"]},
    "minlen-unicode": {"type": "string", "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
    "integer-big": {
        "type": "integer",
        "minimum": -9223372036854775808,
        "maximum": 9223372036854775807,
    },
    "exclusive-num": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
    "recursive-defs": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    "d4-items-bool-addl": {"type": "array", "items": {"type": "string"}, "additionalItems": False},
    "oneof-objects-disc": {
        "oneOf": [
            {
                "type": "object",
                "properties": {"kind": {"const": "a"}, "x": {"type": "string"}},
                "required": ["kind"],
            },
            {
                "type": "object",
                "properties": {"kind": {"const": "b"}, "y": {"type": "integer"}},
                "required": ["kind"],
            },
        ]
    },
    "oneof-str-formats": {
        "oneOf": [{"type": "string", "format": "ipv4"}, {"type": "string", "format": "ipv6"}]
    },
    "oneof-str-enum-pattern": {
        "oneOf": [{"type": "string", "enum": ["auto"]}, {"type": "string", "pattern": "^[0-9]+px$"}]
    },
    "oneof-num-str": {"oneOf": [{"type": "number"}, {"type": "string", "pattern": "^[0-9]+%$"}]},
    "oneof-bool-obj": {
        "oneOf": [
            {"type": "boolean"},
            {"type": "object", "properties": {"enabled": {"type": "boolean"}}},
        ]
    },
    "oneof-array-or-item": {
        "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
    },
    "dependentSchemas": {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}, "required": ["b"]}},
    },
}
# (schema, what the refusal says: the keyword, or why the pattern cannot be read)
REFUSED: dict[str, tuple[Any, str]] = {
    "propnames-format": (
        {"type": "object", "propertyNames": {"format": "email"}, "additionalProperties": True},
        "'format: email'",
    ),
    "pattern-backref": (
        {"type": "string", "pattern": "^(a)\\1$"},
        "Backreference is not supported",
    ),
    "pattern-bword": ({"type": "string", "pattern": "\\bfoo\\b"}, "Word boundary is not supported"),
    "uniq-strings": (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "'uniqueItems'",
    ),
    "uniq-objects": (
        {
            "type": "array",
            "items": {"type": "object", "properties": {"a": {"type": "string"}}},
            "uniqueItems": True,
        },
        "'uniqueItems'",
    ),
    "ref-ext-file": (
        {"type": "object", "properties": {"a": {"$ref": "other.json#/definitions/x"}}},
        "'$ref: other.json",
    ),
    "oneof-overlap": (
        {
            "oneOf": [
                {"type": "object", "properties": {"x": {"type": "string"}}},
                {"type": "object", "properties": {"y": {"type": "integer"}}},
            ]
        },
        "'oneOf'",
    ),
    "oneof-int-number": (
        {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0.5}]},
        "'oneOf'",
    ),
}


@pytest.mark.parametrize("schema", SERVED.values(), ids=SERVED.keys())
def test_served(schema: Any) -> None:
    route(compact_json_spec(schema))


@pytest.mark.parametrize(("schema", "reason"), REFUSED.values(), ids=REFUSED.keys())
def test_refused_saying_why(schema: Any, reason: str) -> None:
    with pytest.raises(InvalidGrammarError, match=re.escape(reason)):
        route(compact_json_spec(schema))
