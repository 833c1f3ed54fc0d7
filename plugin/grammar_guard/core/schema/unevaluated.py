"""``unevaluatedProperties`` and ``unevaluatedItems`` written as the adjacent keyword they mean.

``unevaluatedProperties`` applies to the names no keyword evaluated: those
of ``properties``, ``patternProperties`` and ``additionalProperties`` beside
it, and of every in-place applicator (``allOf``, ``anyOf``, ``$ref``...)
that passed. With no in-place applicator left (after the ``allOf`` merge,
which keeps what each branch evaluated), those are the names
``additionalProperties`` applies to: the keyword is ``additionalProperties``
by another name, or, beside one, evaluates nothing at all. The same holds
for ``unevaluatedItems`` and ``items`` (after ``prefixItems``), unless a
``contains`` evaluates some items.

Both engines enforce the adjacent keywords, and neither reads annotations
across subschemas.
"""

from __future__ import annotations

from typing import Any

KEYWORDS = ("unevaluatedProperties", "unevaluatedItems")
# Keywords that evaluate properties or items of the same instance from
# another subschema, whose annotations an unevaluated keyword reads.
_IN_PLACE = frozenset(
    {
        "allOf",
        "anyOf",
        "oneOf",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "dependencies",
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
    }
)


def unevaluated_as_adjacent(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node`` with its unevaluated keywords as the adjacent ones; None: nothing to write."""
    if not node.keys() & set(KEYWORDS) or node.keys() & _IN_PLACE:
        return None
    result = dict(node)
    unevaluated = result.pop("unevaluatedProperties", None)
    if unevaluated is not None and "additionalProperties" not in result:
        result["additionalProperties"] = unevaluated
    unevaluated = result.pop("unevaluatedItems", None)
    if unevaluated is not None and "items" not in result:
        if "contains" in result or isinstance(result.get("prefixItems"), dict):
            return None  # contains evaluates some items; prefixItems malformed
        result["items"] = unevaluated
    return result
