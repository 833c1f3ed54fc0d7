"""``uniqueItems`` over items of a few possible values, written as the arrays it allows.

Neither engine enforces ``uniqueItems``: a grammar cannot remember the
items it has written. But where every position of an array can hold only a
few values (an ``enum`` or ``const``, ``boolean``, ``null``) and the array's
length is bounded (``maxItems``, a tuple closed by ``"items": false``, or
the distinct values themselves: ``{"items": {"enum": ["a", "b"]},
"uniqueItems": true}`` holds at most two), the arrays it allows are finite,
and both engines enforce them as an ``enum``.

Exact by construction: every array the schema allows has its items among
the values each position can hold, so the candidates (distinct items, by
JSON Schema equality) include all of them, and each candidate is kept only
where the evaluator (:func:`evaluate.validates`) decides it passes the whole
node, ``uniqueItems``, bounds and item schemas included. One candidate left
undecided (a reference, a format) leaves the node as written, and so do
more candidates than :data:`MAX_CANDIDATES`.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.evaluate import validates
from grammar_guard.core.schema.negation import nothing_left
from grammar_guard.core.schema.values import canonical, type_set
from grammar_guard.core.schema.vocabulary import (
    ALL_TYPES,
    ANNOTATIONS,
    KEYWORD_TYPES,
    STRUCTURAL,
    TYPE_VALUES,
)

# Arrays tried: four distinct values make 65 arrays, five 326. Each is
# written into the schema, which must stay in proportion to the client's.
MAX_CANDIDATES = 128
# Keywords the candidates are decided against (the evaluator leaves those it
# cannot decide, unevaluatedItems say, undecided); any other keeps the node.
_ARRAY_KEYWORDS = frozenset(
    {"type"} | {key for key, types in KEYWORD_TYPES.items() if types == {"array"}}
)
_OTHER_TYPES = [name for name in ALL_TYPES if name != "array"]


def unique_arrays_written(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node`` with its arrays listed as an ``enum``; None where they are not few and decided."""
    if node.get("uniqueItems") is not True:
        return None
    constraints = node.keys() - ANNOTATIONS - STRUCTURAL
    if not constraints <= _ARRAY_KEYWORDS:
        return None
    untyped = "type" not in node
    if not untyped and type_set(node["type"]) != {"array"}:
        return None
    positions = _position_values(node)
    if positions is None:
        return None
    candidates = _distinct_arrays(positions)
    if candidates is None:
        return None
    schema = {key: node[key] for key in constraints}
    verdicts = [validates(candidate, schema) for candidate in candidates]
    if None in verdicts:
        return None
    arrays = [array for array, passes in zip(candidates, verdicts, strict=True) if passes]
    kept = {key: value for key, value in node.items() if key not in constraints}
    if untyped:
        others = {"type": _OTHER_TYPES}
        if not arrays:
            return {**kept, **others}
        return {**kept, "anyOf": [{"type": "array", "enum": arrays}, others]}
    if not arrays:
        return nothing_left(node)
    return {**kept, "type": "array", "enum": arrays}


def _position_values(node: dict[str, Any]) -> list[list[Any]] | None:
    """The values each position may hold, up to the longest array; None if unbounded.

    The list ends where no value can follow: past ``maxItems``, past a
    closed tuple, or past the distinct values of ``items``.
    """
    prefix = node.get("prefixItems", [])
    items = node.get("items", True)
    most = node.get("maxItems")
    if not isinstance(prefix, list) or isinstance(items, list):
        return None
    if most is not None and (isinstance(most, bool) or not isinstance(most, int)):
        return None
    positions: list[list[Any]] = []
    for schema in prefix:
        if most is not None and len(positions) >= most:
            return positions
        values = _possible_values(schema)
        if values is None:
            return None
        positions.append(values)
    rest = _possible_values(items)
    if rest is None:
        # Past the tuple any value may follow: bounded only by maxItems.
        return positions if most is not None and most <= len(positions) else None
    # Distinct items: the rest holds each of its values once at most.
    longest = len(positions) + len(rest)
    if most is not None:
        longest = min(longest, most)
    positions.extend([rest] * max(0, longest - len(positions)))
    return positions


def _possible_values(schema: Any) -> list[Any] | None:
    """Values that include every value ``schema`` allows; None if those are not few."""
    if schema is False:
        return []
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("enum"), list):
        named = schema["enum"]
        if len(named) > MAX_CANDIDATES:
            return None
        # Repeated values would repeat arrays, and overstate how long a unique one gets.
        first: dict[Any, Any] = {}
        for value in named:
            first.setdefault(canonical(value), value)
        return list(first.values())
    if "const" in schema:
        return [schema["const"]]
    types = type_set(schema.get("type"))
    if not types or not types <= TYPE_VALUES.keys():
        return None
    return [value for name in sorted(types) for value in TYPE_VALUES[name]]


def _distinct_arrays(positions: list[list[Any]]) -> list[list[Any]] | None:
    """Every array of distinct items, each from its position's values, of any length the
    positions allow, shortest first; None past :data:`MAX_CANDIDATES`."""
    arrays: list[list[Any]] = [[]]
    # Each array with the equality keys of its items, to keep the next distinct.
    frontier: list[tuple[list[Any], frozenset[Any]]] = [([], frozenset())]
    for values in positions:
        keyed = [(value, canonical(value)) for value in values]
        longer = [
            ([*array, value], keys | {key})
            for array, keys in frontier
            for value, key in keyed
            if key not in keys
        ]
        if len(arrays) + len(longer) > MAX_CANDIDATES:
            return None
        if not longer:
            break
        arrays.extend(array for array, _ in longer)
        frontier = longer
    return arrays
