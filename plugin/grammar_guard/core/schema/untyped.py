"""A schema without ``type`` written as one ``anyOf`` branch per type its keywords constrain.

``{"minimum": 2}`` means "a number of at least 2, or any value that is not a
number": a type-specific keyword leaves the other types alone. Grammar
engines tend to read a schema with no ``type`` as "any JSON value" and drop
such keywords, so the schema is written out with the types made explicit::

    {"anyOf": [{"type": "number", "minimum": 2},
               {"type": ["null", "boolean", "object", "array", "string"]}]}

Each instance has exactly one type, and each keyword constrains only its
own, so the two schemas validate the same values.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.vocabulary import (
    ALL_TYPES,
    ANNOTATIONS,
    KEYWORD_TYPES,
    KNOWN_KEYWORDS,
    NUMERIC_TYPES,
    STRUCTURAL,
)

# Keywords that say an untyped schema is an object or an array, as its author
# means and as engines already read it (xgrammar builds such a schema as
# that type alone). Spelled out, the other types would let a model answer a
# string where an object was wanted; such schemas are left as written unless
# they also constrain numbers or strings.
_SHAPE_KEYWORDS = frozenset(
    {
        "properties",
        "additionalProperties",
        "unevaluatedProperties",
        "items",
        "prefixItems",
        "unevaluatedItems",
    }
)


def split_by_type(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node``, which has no ``type``, as an ``anyOf`` over types; None: nothing to split.

    Left alone: a schema with a ``type``; one whose type-specific keywords
    can never fail; one that also constrains values of every type (``enum``,
    ``$ref``, ``anyOf``, ``not``...), where an engine that reads one such
    keyword alone would still drop the rest, so nothing is won; and an
    object or array shape (see :data:`_SHAPE_KEYWORDS`).
    """
    if "type" in node:
        return None
    by_type: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] = {}
    for key, value in node.items():
        applies_to = KEYWORD_TYPES.get(key)
        if applies_to is not None:
            kind = "number" if applies_to == NUMERIC_TYPES else next(iter(applies_to))
            by_type.setdefault(kind, {})[key] = value
        elif _neutral(key) or not can_fail(key, value, node):
            shared[key] = value
        else:
            return None
    constrained = [
        kind
        for kind, keywords in by_type.items()
        if any(can_fail(key, value, node) for key, value in keywords.items())
    ]
    if not constrained:
        return None
    if not {"number", "string"} & set(constrained) and _SHAPE_KEYWORDS & node.keys():
        return None
    others = [kind for kind in ALL_TYPES if kind not in by_type]
    branches = [{"type": kind, **keywords} for kind, keywords in by_type.items()]
    branches.append({"type": others})
    return {**shared, "anyOf": branches}


def _neutral(key: str) -> bool:
    """Whether ``key`` constrains no instance: an annotation, a structural or unknown keyword."""
    return key in ANNOTATIONS or key in STRUCTURAL or key not in KNOWN_KEYWORDS
