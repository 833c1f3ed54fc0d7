"""The draft 2020-12 keyword vocabulary: what each keyword is, which instance
types it constrains, and where a schema holds its subschemas."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from grammar_guard.core.schema.pointers import join_pointer

JSON_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})
# The types a schema without "type" allows ("integer" within "number"), in the
# order the rewrites list them.
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number")
# The values of the types that have finitely many.
TYPE_VALUES: Mapping[str, tuple[Any, ...]] = {"boolean": (True, False), "null": (None,)}

# Keywords that impose nothing on an instance (meta-data and content
# vocabularies; in 2020-12 the content keywords are annotations only).
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)
# Keys that name or hold schemas without constraining the instance themselves.
# ``definitions`` is the pre-2019 spelling of ``$defs`` that many schemas use.
STRUCTURAL = frozenset(
    {"$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs", "definitions"}
)
APPLICATORS = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "prefixItems",
        "items",
        "contains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
VALIDATION = frozenset(
    {
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "format",
    }
)
# Keywords of earlier drafts that 2020-12 replaced; a client writing them
# means a constraint, so they are analysed (and, unless empty, reported).
LEGACY_KEYWORDS = frozenset({"dependencies", "additionalItems"})
KNOWN_KEYWORDS = ANNOTATIONS | STRUCTURAL | APPLICATORS | VALIDATION | LEGACY_KEYWORDS

NUMERIC_TYPES = frozenset({"number", "integer"})
# The instance types a keyword constrains; a keyword not listed constrains every type.
KEYWORD_TYPES: Mapping[str, frozenset[str]] = {
    **dict.fromkeys(
        ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), NUMERIC_TYPES
    ),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), frozenset({"string"})),
    **dict.fromkeys(
        (
            "items",
            "prefixItems",
            "contains",
            "minContains",
            "maxContains",
            "minItems",
            "maxItems",
            "uniqueItems",
            "unevaluatedItems",
            "additionalItems",
        ),
        frozenset({"array"}),
    ),
    **dict.fromkeys(
        (
            "properties",
            "patternProperties",
            "additionalProperties",
            "propertyNames",
            "required",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "unevaluatedProperties",
            "dependencies",
        ),
        frozenset({"object"}),
    ),
}


# Where a schema holds subschemas: maps of them, lists of them, or one.
SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
SCHEMA_LISTS = frozenset({"prefixItems", "anyOf", "oneOf", "allOf"})
SCHEMA_VALUES = frozenset(
    {
        "additionalProperties",
        "unevaluatedProperties",
        "items",
        "additionalItems",
        "unevaluatedItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
    }
)


def subschemas(node: Mapping[str, Any], pointer: str) -> Iterator[tuple[Any, str]]:
    """The subschemas directly under ``node``, each with its JSON pointer."""
    for keyword, value in node.items():
        if keyword in SCHEMA_MAPS and isinstance(value, dict):
            for name, item in value.items():
                yield item, join_pointer(pointer, keyword, name)
        elif keyword in SCHEMA_LISTS and isinstance(value, list):
            for index, item in enumerate(value):
                yield item, join_pointer(pointer, keyword, index)
        elif keyword in SCHEMA_VALUES:
            yield value, join_pointer(pointer, keyword)


def closed_object_names(node: Mapping[str, Any]) -> list[str] | None:
    """The names ``properties`` lists, where ``node`` allows no other; None: it may have others.

    Closed means ``additionalProperties: false`` with no ``patternProperties``.
    """
    listed = node.get("properties", {})
    if node.get("additionalProperties") is not False or "patternProperties" in node:
        return None
    return list(listed) if isinstance(listed, dict) else None


def every_schema(schema: Any) -> Iterator[dict[str, Any]]:
    """Each object schema in ``schema``, at any depth, ``schema`` itself first.

    A node's subschemas are read once the caller has seen it: a caller may
    rewrite a node in place, and what it wrote there is walked too.
    """
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            yield node
            pending.extend(child for child, _ in subschemas(node, ""))


# What an instance's type can be, finer than "type" names: "number" is both.
TYPE_KINDS: Mapping[str, frozenset[str]] = {
    "null": frozenset({"null"}),
    "boolean": frozenset({"boolean"}),
    "object": frozenset({"object"}),
    "array": frozenset({"array"}),
    "string": frozenset({"string"}),
    "integer": frozenset({"integer"}),
    "number": frozenset({"integer", "fraction"}),
}
