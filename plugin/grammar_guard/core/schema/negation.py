"""The simplest ``not``\\ s written as what they leave: neither engine enforces ``not``.

- a ``not`` of a schema that accepts everything (``{}``, ``true``, only
  annotations): no value is valid, and the schema is ``false``;
- ``"not": false``: every value passes it, and the keyword goes;
- a schema whose values are finite (an ``enum``, a ``const``, ``type``
  boolean or null) and a ``not`` that says only ``type``, ``enum`` or
  ``const``, each decided value by value: the values left, as the ``enum``
  (or ``false`` where none is); beside an ``enum`` or ``const``, a ``not``
  of any schema :func:`evaluate.validates` decides for each value (up to
  64 of them);
- any other schema and a ``not`` of named values (``const``, ``enum``): the
  values of its types outside them (:func:`values_outside`): the other
  types, booleans and strings (a ``pattern``, :mod:`string_complement`),
  the ranges between the named numbers;
- ``"not": {"items": S}``: the arrays with an item that S refuses,
  ``"type": "array"`` and ``"contains": {"not": S}`` (``"contains": X`` for
  ``"items": {"not": X}``, as draft-04 schemas write ``contains``);
- ``"not": {"type": ...}`` otherwise: the schema's own types (all of them
  if it has none) less the negated ones, as its ``type``, where type names
  can say it. ``integer`` is part of ``number``, but the numbers that are
  not integers have no name: ``not {"type": "integer"}`` of a schema that
  allows numbers stays as written, while ``not {"type": "number"}`` takes
  the integers too and is written.

Every other ``not`` stays as written, and is refused as before.
"""

from __future__ import annotations

import itertools
from typing import Any

from grammar_guard.core.schema.evaluate import values_split
from grammar_guard.core.schema.string_complement import pattern_outside
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import (
    canonical,
    is_number,
    json_type,
    satisfies,
    type_names,
)
from grammar_guard.core.schema.vocabulary import ALL_TYPES, TYPE_KINDS, TYPE_VALUES

# Named values decided one by one against any negated schema: each costs a walk of it.
MAX_NAMED_VALUES = 64
# The keywords of a negated schema whose verdict on each value is decided here.
_DECIDED = frozenset({"type", "enum", "const"})
# A schema holding definitions is not replaced by false: a reference from
# elsewhere may point into them (references there do not pin it).
_DEFINITIONS = ("$defs", "definitions")


def negation_rewritten(node: dict[str, Any]) -> Any:
    """``node`` with its ``not`` written as what it leaves (possibly ``false``); None if not exact.

    A malformed ``type`` or ``enum`` leaves the node as written, for the
    engine to report rather than a rewrite to hide.
    """
    if "not" not in node:
        return None
    own_types = type_names(node["type"]) if "type" in node else ALL_TYPES
    if own_types is None or ("enum" in node and not isinstance(node["enum"], list)):
        return None
    rest = {key: value for key, value in node.items() if key != "not"}
    negated = node["not"]
    if negated is False:
        return rest
    if negated is True:
        return nothing_left(node)
    if not isinstance(negated, dict):
        return None
    constraints = {k: v for k, v in negated.items() if can_fail(k, v, negated)}
    if not constraints:
        return nothing_left(node)
    if constraints.keys() == {"items"}:
        return _some_item(node, rest, own_types, constraints["items"])
    if not constraints.keys() <= _DECIDED:
        return _named_values_left(node, rest, negated) if node.keys() & {"enum", "const"} else None
    if "type" in constraints and type_names(constraints["type"]) is None:
        return None
    if "enum" in constraints and not isinstance(constraints["enum"], list):
        return None
    if "enum" in node or "const" in node or set(own_types) <= TYPE_VALUES.keys():
        return _values_left(node, rest, own_types, constraints)
    if constraints.keys() == {"type"}:
        return _types_left(node, rest, own_types, constraints["type"])
    if "type" not in constraints:
        return _named_left(node, rest, own_types, constraints)
    return None


def _some_item(
    node: dict[str, Any], rest: dict[str, Any], own_types: tuple[str, ...], items: Any
) -> Any:
    """``not {"items": S}``: an array with an item S refuses, a ``contains`` of ``not S``.

    ``items`` passes every value that is no array, so its ``not`` takes
    arrays only; ``not {"items": {"not": X}}`` is ``contains`` X. None where
    the node has a ``contains`` of its own.
    """
    if "contains" in node:
        return None
    if "array" not in own_types:
        return nothing_left(node)
    negated = isinstance(items, dict) and items.keys() == {"not"}
    return {**rest, "type": "array", "contains": items["not"] if negated else {"not": items}}


def _named_left(
    node: dict[str, Any], rest: dict[str, Any], own_types: tuple[str, ...], negated: dict[str, Any]
) -> Any:
    """``rest`` less the values the negated ``const``/``enum`` names; None where not written."""
    named = [negated["const"]] if "const" in negated else negated["enum"]
    excluded = [value for value in named if all(satisfies(value, k, v) for k, v in negated.items())]
    outside = values_outside(excluded, own_types)
    if outside is None:
        return None
    if outside is False:
        return nothing_left(node)
    if "anyOf" not in outside and not (outside.keys() - {"type"}) & rest.keys():
        return {**rest, **outside}  # its types are among the node's own
    if "anyOf" in rest:
        return None
    return {**rest, "anyOf": outside.get("anyOf", [outside])}


def values_outside(named: list[Any], types: tuple[str, ...]) -> Any:
    """A schema of exactly the values of ``types`` not among ``named``; None where not written.

    Each type whose values ``named`` leaves whole is kept as a type name;
    booleans left are named; strings left are a :mod:`string_complement`
    pattern; numbers left are the ranges between the named ones, bounds
    excluded. ``false`` where no value is left. None for more than
    :data:`MAX_NAMED_VALUES` values, an object or array among the values of
    those types (no schema says "any object but this one"), or strings past
    the pattern's bounds.
    """
    kinds = _kinds(types)
    if len(named) > MAX_NAMED_VALUES or any(
        json_type(value) in ("object", "array") and json_type(value) in kinds for value in named
    ):
        return None
    whole = [name for name in ("object", "array") if name in kinds]
    if "null" in kinds and None not in named:
        whole.insert(0, "null")
    branches: list[Any] = []
    booleans = [flag for flag in (True, False) if not any(value is flag for value in named)]
    if "boolean" in kinds and len(booleans) == 2:
        whole.append("boolean")
    elif "boolean" in kinds:
        branches.extend({"const": flag} for flag in booleans)
    strings = [value for value in named if isinstance(value, str)]
    if "string" in kinds and not strings:
        whole.append("string")
    elif "string" in kinds:
        pattern = pattern_outside(strings)
        if pattern is None:
            return None
        branches.append({"type": "string", "pattern": pattern})
    if "integer" in kinds:
        number_types, ranges = _numbers_left([value for value in named if is_number(value)], kinds)
        whole.extend(number_types)
        branches.extend(ranges)
    if whole:
        branches.insert(0, {"type": whole[0] if len(whole) == 1 else whole})
    if not branches:
        return False
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _numbers_left(named: list[Any], kinds: set[str]) -> tuple[list[str], list[Any]]:
    """The numbers of ``kinds`` other than ``named``: a whole type name, or ranges between them.

    Integers alone are bounded inclusively by the integers next to the
    named ones (a named fraction is no integer, and excludes none).
    """
    name = "number" if "fraction" in kinds else "integer"
    if name == "integer":
        # An int is whole as it is (float() of one past 1e308 would overflow).
        named = [int(value) for value in named if isinstance(value, int) or value.is_integer()]
    points = sorted({canonical(value): value for value in named}.values())
    if not points:
        return [name], []
    first, last = points[0], points[-1]
    if name == "number":
        between = [
            {"exclusiveMinimum": low, "exclusiveMaximum": high}
            for low, high in itertools.pairwise(points)
        ]
        ranges = [{"exclusiveMaximum": first}, *between, {"exclusiveMinimum": last}]
    else:
        between = [
            {"minimum": low + 1, "maximum": high - 1}
            for low, high in itertools.pairwise(points)
            if high - low > 1
        ]
        ranges = [{"maximum": first - 1}, *between, {"minimum": last + 1}]
    return [], [{"type": name, **bounds} for bounds in ranges]


def _values_left(
    node: dict[str, Any], rest: dict[str, Any], own_types: tuple[str, ...], negated: dict[str, Any]
) -> Any:
    """``rest`` allowing only the node's values the negated schema rejects."""

    def excluded(value: Any) -> bool:
        return all(satisfies(value, key, argument) for key, argument in negated.items())

    if "enum" in node:
        left = [value for value in node["enum"] if not excluded(value)]
    elif "const" in node:
        left = [] if excluded(node["const"]) else [node["const"]]
    else:
        values = [value for name in own_types for value in TYPE_VALUES[name]]
        left = [value for value in values if not excluded(value)]
    if not left:
        return nothing_left(node)
    return rest if "const" in node and "enum" not in node else {**rest, "enum": left}


def _named_values_left(node: dict[str, Any], rest: dict[str, Any], negated: Any) -> Any:
    """``rest`` allowing only the node's named values that fail the negated schema.

    Each is decided by :func:`evaluate.validates`; where one cannot be (a
    pattern, a reference), or there are too many, the node stays as written.
    """
    named = node["enum"] if "enum" in node else [node["const"]]
    if not isinstance(named, list) or len(named) > MAX_NAMED_VALUES:
        return None
    return named_values_written(node, rest, named, negated, passing=False)


def named_values_written(
    node: dict[str, Any], written: dict[str, Any], named: list[Any], schema: Any, *, passing: bool
) -> Any:
    """``written`` allowing only the ``named`` values of ``node`` that pass ``schema``
    (``passing``) or fail it; None where one is not decided.

    A ``const`` alone stays one; ``false`` (:func:`nothing_left`) where no value is left.
    """
    split = values_split(named, schema)
    if split is None:
        return None
    left = split[0] if passing else split[1]
    if not left:
        return nothing_left(node)
    if "enum" not in node:
        return {**written, "const": node["const"]}
    return {**written, "enum": left}


def _types_left(
    node: dict[str, Any], rest: dict[str, Any], own_types: tuple[str, ...], negated: Any
) -> Any:
    """``rest`` typed with the node's types less the negated ones; None where no names say it."""
    names = type_names(negated)
    assert names is not None
    allowed = _kinds(own_types) - _kinds(names)
    left = [name for name in dict.fromkeys(own_types) if TYPE_KINDS[name] <= allowed]
    if _kinds(left) != allowed:
        return None  # the numbers that are not integers, which no type name stands for
    if not left:
        return nothing_left(node)
    return {**rest, "type": left[0] if len(left) == 1 else left}


def types_outside(value: Any) -> tuple[str, ...] | None:
    """The type names of the values ``"type": value`` rejects; None where no names say them.

    None too for a value that is no ``type`` (an unknown name, an empty list).
    """
    names = type_names(value)
    if names is None:
        return None
    allowed = _kinds(ALL_TYPES) - _kinds(names)
    left = tuple(name for name in ALL_TYPES if TYPE_KINDS[name] <= allowed)
    return left if _kinds(left) == allowed else None


def nothing_left(node: dict[str, Any]) -> Any:
    """``false``, which accepts nothing; None where the node holds definitions to keep.

    What a node none of whose values is left is written as.
    """
    return None if any(key in node for key in _DEFINITIONS) else False


def _kinds(names: Any) -> set[str]:
    return set().union(*(TYPE_KINDS[name] for name in names))
