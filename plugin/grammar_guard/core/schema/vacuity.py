"""Which keywords can never make an instance invalid, by JSON Schema's semantics.

Such a keyword needs no enforcing, so the analysis never reports it: an
engine that ignores ``minLength: 0`` or ``items: {}`` loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grammar_guard.core.schema.vocabulary import (
    ANNOTATIONS,
    KNOWN_KEYWORDS,
    LEGACY_KEYWORDS,
    STRUCTURAL,
)

# The keywords that constrain an instance at all.
_CONSTRAINTS = KNOWN_KEYWORDS - ANNOTATIONS - STRUCTURAL


def _vacuous_schema(value: Any) -> bool:
    """Whether a schema accepts every value: ``true``, or an object schema whose
    every keyword is an annotation or can never fail."""
    if value is True:
        return True
    if not isinstance(value, dict):
        return False
    return all(not can_fail(key, item, value) for key, item in value.items())


def _unsatisfiable(value: Any) -> bool:
    """Whether a schema accepts no value at all (a sufficient test)."""
    if value is False:
        return True
    return isinstance(value, dict) and "not" in value and _vacuous_schema(value["not"])


def _vacuous(key: str, value: Any, node: Mapping[str, Any]) -> bool:
    """Whether ``key: value`` can never make an instance invalid (JSON Schema semantics)."""
    if key in ("minLength", "minItems", "minProperties", "minContains") and value == 0:
        return True
    if key == "uniqueItems":
        return value is False
    if key == "required" and value == []:
        return True
    if key in ("properties", "patternProperties", "dependentSchemas"):
        return isinstance(value, dict) and all(_vacuous_schema(v) for v in value.values())
    if key == "dependentRequired":
        return isinstance(value, dict) and all(v == [] for v in value.values())
    if key in LEGACY_KEYWORDS:
        if key == "dependencies":
            return isinstance(value, dict) and all(
                v == [] or _vacuous_schema(v) for v in value.values()
            )
        return key == "additionalItems" and _vacuous_schema(value)
    if key in (
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "items",
        "propertyNames",
    ):
        return _vacuous_schema(value)
    if key == "not":
        return _unsatisfiable(value)
    if key == "if":
        return "then" not in node and "else" not in node
    if key in ("then", "else"):
        return "if" not in node
    if key in ("minContains", "maxContains"):
        return "contains" not in node
    if key == "contains":
        return node.get("minContains") == 0 and "maxContains" not in node
    if key == "anyOf":
        return isinstance(value, list) and any(_vacuous_schema(v) for v in value)
    if key == "allOf":
        return isinstance(value, list) and bool(value) and all(_vacuous_schema(v) for v in value)
    return False


def can_fail(key: str, value: Any, node: Mapping[str, Any]) -> bool:
    """Whether ``key: value`` in ``node`` is a keyword that can make an instance invalid."""
    return key in _CONSTRAINTS and not _vacuous(key, value, node)
