"""A branch's types that no value passes, dropped (the whole branch where none is left).

A literal joined with a neighbour's complement may leave a branch whose
bounds no value of a type meets (``minimum`` 3 and ``exclusiveMaximum`` 3,
a name both required and forbidden). Such a branch is exact, but an engine
refuses a schema that holds it, so the values of that type are dropped
instead, and the keywords that only constrain them. Kept apart from the
normal form in :mod:`~grammar_guard.core.schema.boolean_forms`, which runs
this on each branch it writes: it reads one finished schema, not literals.
"""

from __future__ import annotations

import itertools
from typing import Any

from grammar_guard.core.schema.dependencies import admits_no_object
from grammar_guard.core.schema.values import is_number
from grammar_guard.core.schema.vocabulary import ALL_TYPES

# Lower and upper bounds of each type, for branches they leave empty.
_RANGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "number": (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")),
    "string": (("minLength",), ("maxLength",)),
    "array": (("minItems",), ("maxItems",)),
    "object": (("minProperties",), ("maxProperties",)),
}
# The keywords of each type a branch without values of that type no longer needs.
_KEYWORDS_OF = {
    key: kind
    for kind, keys in (
        ("number", ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf")),
        ("string", ("minLength", "maxLength", "pattern", "format")),
        ("array", ("minItems", "maxItems", "items", "prefixItems", "contains", "uniqueItems")),
        ("object", ("minProperties", "maxProperties", "required", "properties",
                    "additionalProperties", "patternProperties", "propertyNames")),
    )
    for key in keys
}  # fmt: skip


# --- branches no value of a type passes


def without_empty_types(branch: Any) -> Any:
    """``branch`` without the types it admits no value of (``false`` if none is left).

    Such a branch (``minimum`` 3 and ``exclusiveMaximum`` 3, a name both
    required and forbidden: a literal joined with a neighbour's complement)
    is exact, but an engine refuses a schema that holds it: the values of
    that type are dropped instead.
    """
    if not isinstance(branch, dict):
        return branch
    empty = [kind for kind in _RANGES if _range_empty(branch, kind)]
    if "object" not in empty and (admits_no_object(branch) or _too_many_required(branch)):
        empty.append("object")
    if not empty:
        return branch
    declared = branch.get("type", list(ALL_TYPES))
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list):
        return branch  # a malformed type, for the engine to report
    dropped = {*empty, *(("integer",) if "number" in empty else ())}
    left = [name for name in names if name not in dropped]
    if not left:
        return False
    kept = {
        key: value
        for key, value in branch.items()
        if key not in _KEYWORDS_OF or _KEYWORDS_OF[key] not in empty
    }
    return {**kept, "type": left if len(left) > 1 else left[0]}


def _too_many_required(branch: dict[str, Any]) -> bool:
    """Whether ``branch`` requires more names than its ``maxProperties`` lets an object have."""
    required, most = branch.get("required"), branch.get("maxProperties")
    if not isinstance(required, list) or not isinstance(most, int) or isinstance(most, bool):
        return False
    return len({name for name in required if isinstance(name, str)}) > most


def _range_empty(branch: dict[str, Any], kind: str) -> bool:
    lows, highs = _RANGES[kind]
    for low_key, high_key in itertools.product(lows, highs):
        low, high = branch.get(low_key), branch.get(high_key)
        if not (is_number(low) and is_number(high)):
            continue
        exclusive = low_key.startswith("exclusive") or high_key.startswith("exclusive")
        if low > high or (low == high and exclusive):
            return True
    return False
