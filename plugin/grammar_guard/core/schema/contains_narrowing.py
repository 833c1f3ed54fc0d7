"""A ``contains`` written as the arrays whose first match is among their first few items.

Neither engine enforces ``contains``: "some item matches", wherever it is, is
no shape a grammar writes item by item without looking back. Arrays whose
item at position ``k`` matches are such a shape (``prefixItems`` of ``k``
items that may be anything, then the match), so the node becomes an
``anyOf`` of those for ``k`` below :data:`POSITIONS`, with a branch for every
value that is no array (``contains`` constrains arrays only). A
``minContains`` of ``m`` asks for ``m`` matches in a row there.

Every array it accepts holds a match, so nothing invalid gets through; an
array whose first match comes later is refused, though valid. That makes it
a narrowing, which routing asks for only where no engine serves the schema
as written (``narrowed_schema_text`` in :mod:`grammar_guard.core.schema.rewrite`).
The node's own keywords stay beside the ``anyOf``: its ``items`` apply to
every item (the node has no ``prefixItems`` of its own), its ``minItems`` and
``maxItems`` to every array.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.values import type_names
from grammar_guard.core.schema.vocabulary import JSON_TYPES

# Positions the first match may take: the suite's valid arrays have it among
# their first three items.
POSITIONS = 4
# Read beside ``contains``, or bounding where a match can be: left as written.
_LEFT_AS_WRITTEN = frozenset({"prefixItems", "maxContains", "unevaluatedItems", "anyOf"})


def narrowed_contains(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node`` with its ``contains`` written as an ``anyOf`` of match positions; else None.

    Left as written: a ``maxContains`` (the items after the matches would have
    to fail ``contains``), ``prefixItems`` or ``unevaluatedItems`` beside it.
    """
    if "contains" not in node or node.keys() & _LEFT_AS_WRITTEN:
        return None
    matches = node.get("minContains", 1)
    if isinstance(matches, bool) or not isinstance(matches, int) or not 1 <= matches <= POSITIONS:
        return None  # 0 cannot fail: the analysis lets it through as written
    types = set(JSON_TYPES - {"integer"}) if "type" not in node else _named(node["type"])
    if types is None or "array" not in types:
        return None
    longest = node.get("maxItems", POSITIONS)
    if isinstance(longest, bool) or not isinstance(longest, int):
        return None
    branches: list[Any] = []
    others = sorted(types - {"array"})
    if others:
        branches.append({"type": others})
    # Any item is {}: xgrammar refuses a boolean among prefixItems.
    match = {} if node["contains"] is True else node["contains"]
    # No array holds a match of false: only the other types are left.
    reachable = 0 if match is False else min(POSITIONS, longest - matches + 1)
    for position in range(reachable):
        prefix = [{} for _ in range(position)] + [match] * matches
        # "items": true keeps the tuple open: the engines close one that does not say.
        branches.append(
            {"type": "array", "prefixItems": prefix, "items": True, "minItems": len(prefix)}
        )
    if not branches:
        return None  # arrays too short to hold a match are all the node allows: left as written
    kept = {key: value for key, value in node.items() if key not in ("contains", "minContains")}
    return {**kept, "anyOf": branches}


def _named(value: Any) -> set[str] | None:
    names = type_names(value)
    return None if names is None else set(names)
