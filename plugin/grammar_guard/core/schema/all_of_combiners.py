"""How the ``allOf`` merge combines the values several parts give one keyword.

A keyword that stands alone (``type``, ``enum``, a bound, ``multipleOf``,
``required``, ``uniqueItems``, ``dependentRequired``) is merged by a
function of its values alone: the common types, the tighter bound, the
union of the names. Those functions, and the shape checks they and
:mod:`~grammar_guard.core.schema.all_of_merge` share, live here apart from
the merge itself, which reads whole schemas; each raises
:class:`Unmergeable` where no one value says exactly what all of them do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from grammar_guard.core.schema.values import is_number, json_equal
from grammar_guard.core.schema.vocabulary import TYPE_KINDS

# Keywords combined by keeping the largest (lower bounds) or smallest (upper bounds) value.
_LOWER_BOUNDS = frozenset({"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"})
_UPPER_BOUNDS = frozenset({"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"})


class Unmergeable(Exception):
    """These parts have no single equivalent schema the ``allOf`` merge can write."""


# --- combining one keyword's values ---------------------------------------------------


def _types(values: list[Any]) -> Any:
    """The types every part allows; "number" and "integer" meet in "integer"."""
    lists = [[value] if isinstance(value, str) else value for value in values]
    if not all(
        isinstance(names, list) and all(isinstance(n, str) and n in TYPE_KINDS for n in names)
        for names in lists
    ):
        raise Unmergeable
    allowed = [set().union(*(TYPE_KINDS[name] for name in names)) for names in lists]
    kinds = set.intersection(*allowed)
    common: list[str] = []
    for name in lists[0]:
        if name == "number" and "fraction" not in kinds:
            name = "integer"  # a number type met an integer type
        if TYPE_KINDS[name] <= kinds and name not in common:
            common.append(name)
    if not common:
        raise Unmergeable  # no value has every type: unsatisfiable, left to the engines
    return common[0] if len(common) == 1 else common


def _enums(values: list[Any]) -> list[Any]:
    lists = [value for value in values if isinstance(value, list)]
    if len(lists) != len(values):
        raise Unmergeable
    common = [v for v in lists[0] if all(any(json_equal(v, w) for w in other) for other in lists)]
    if not common:
        raise Unmergeable  # unsatisfiable, left to the engines
    return common


def _tightest(pick: Callable[[Iterable[Any]], Any]) -> Callable[[list[Any]], Any]:
    def combine(values: list[Any]) -> Any:
        if not all(is_number(value) for value in values):
            raise Unmergeable
        return pick(values)

    return combine


def _multiple_of(values: list[Any]) -> Any:
    """The largest divisor, if it is a multiple of every other one (integers only).

    Fractional divisors are left alone: validators test them in floating
    point, where 0.3 being a multiple of 0.1 is not a given.
    """
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise Unmergeable
    largest = max(values)
    if any(largest % value for value in values):
        raise Unmergeable
    return largest


def _required(values: list[Any]) -> list[Any]:
    if not all(isinstance(value, list) for value in values):
        raise Unmergeable
    return list(dict.fromkeys(name for value in values for name in value))


def _unique_items(values: list[Any]) -> bool:
    if not all(isinstance(value, bool) for value in values):
        raise Unmergeable
    return any(values)


def _dependent_required(values: list[Any]) -> dict[str, Any]:
    maps = all_dicts(values)
    return {name: _required([m[name] for m in maps if name in m]) for name in union_keys(maps)}


COMBINERS: dict[str, Callable[[list[Any]], Any]] = {
    "type": _types,
    "enum": _enums,
    **dict.fromkeys(_LOWER_BOUNDS, _tightest(max)),
    **dict.fromkeys(_UPPER_BOUNDS, _tightest(min)),
    "multipleOf": _multiple_of,
    "required": _required,
    "uniqueItems": _unique_items,
    "dependentRequired": _dependent_required,
}


# --- shape checks ------------------------------------------------------------------------


def union_keys(maps: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for m in maps for key in m))


def all_dicts(values: list[Any]) -> list[dict[str, Any]]:
    return [dict_or_fail(value) for value in values]


def dict_or_fail(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Unmergeable
    return value


def list_or_fail(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise Unmergeable
    return value
