"""The literals of the boolean forms, and the complement of each: the values it fails.

:mod:`~grammar_guard.core.schema.boolean_forms` writes ``oneOf``, ``not``
and ``if`` in disjunctive normal form, whose terms conjoin literals:
keywords one schema says the failures of (``type``, each name of
``required``, a ``properties`` entry of named values or types, a bound, a
length or count, a ``pattern`` with a written complement). Here each keyword
is read as its literals, each with an identity that tells a literal and
its complement apart and the two schemas they stand for; the normal form
itself, which only compares identities, is built there.
"""

from __future__ import annotations

import json
from typing import Any

from grammar_guard.core.schema.class_run_complement import run_complement
from grammar_guard.core.schema.negation import types_outside, values_outside
from grammar_guard.core.schema.pattern_complement import automaton_complement
from grammar_guard.core.schema.values import is_number
from grammar_guard.core.schema.vocabulary import ALL_TYPES, ANNOTATIONS

MAX_LITERALS = 64  # in one term
# Bounds and the type each applies to: a lower one fails below, an upper one above.
_BOUNDS: dict[str, tuple[str, str]] = {
    # keyword: (the type it constrains, the keyword of its complement)
    "minimum": ("number", "exclusiveMaximum"),
    "exclusiveMinimum": ("number", "maximum"),
    "maximum": ("number", "exclusiveMinimum"),
    "exclusiveMaximum": ("number", "minimum"),
}
_COUNTS: dict[str, tuple[str, str, int]] = {
    # keyword: (the type it constrains, the keyword of its complement, the shift)
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1),
    "maxProperties": ("object", "minProperties", 1),
}
# A literal as a keyword reads: (identity, whether negated, its schema, its complement).
_Definition = tuple[str, bool, Any, Any]


# --- literals and their complements


def literals_of(key: str, value: Any, *, objects_only: bool) -> list[_Definition] | None:
    """``key: value`` as literals; None: it is not one.

    ``objects_only``: the schema holding it is of type ``object``, where a
    property forbidden is exactly the complement of the name required, and
    is written as that, so that the two are seen to exclude each other.
    """
    if key == "type":
        outside = types_outside(value)
        if outside is None:
            return None
        complement = {"type": list(outside)} if outside else False
        return [(_identity(key, value), False, {key: value}, complement)]
    names = value if key in ("required", "properties") and isinstance(value, list | dict) else ()
    if len(names) > MAX_LITERALS:
        return None  # one literal a name: past the bound, the keyword is kept whole
    if key == "required" and isinstance(value, list) and all(isinstance(n, str) for n in value):
        return [
            (_required(name), False, {key: [name]}, _object({"properties": {name: False}}))
            for name in dict.fromkeys(value)
        ]
    if key == "properties" and isinstance(value, dict) and value:
        outside = {name: _entry_complement(entry) for name, entry in value.items()}
        if all(complement is not None for complement in outside.values()):
            return [
                (
                    _identity(key, {name: entry}),
                    False,
                    {key: {name: entry}},
                    _object({"required": [name], "properties": {name: outside[name]}}),
                )
                for name, entry in value.items()
            ]
        if not all(entry is False for entry in value.values()):
            return None
        if objects_only:
            return [
                (_required(name), True, _object({key: {name: False}}), {"required": [name]})
                for name in value
            ]
        return [
            (
                f"absent={json.dumps(name)}",
                False,
                {key: {name: False}},
                _object({"required": [name]}),
            )
            for name in value
        ]
    if key in ("const", "enum"):
        named = [value] if key == "const" else value
        outside = values_outside(named, ALL_TYPES) if isinstance(named, list) and named else None
        return None if outside is None else [(_identity(key, value), False, {key: value}, outside)]
    if key == "pattern" and isinstance(value, str):
        outside = run_complement(value) or automaton_complement(value)
        if outside is None:
            return None
        return [(_identity(key, value), False, {key: value}, {"type": "string", key: outside})]
    if key in _BOUNDS and is_number(value):
        kind, opposite = _BOUNDS[key]
        return [(_identity(key, value), False, {key: value}, {"type": kind, opposite: value})]
    if key in _COUNTS and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        kind, opposite, shift = _COUNTS[key]
        bound = value + shift
        complement = {"type": kind, opposite: bound} if bound >= 0 else False
        return [(_identity(key, value), False, {key: value}, complement)]
    return None


def _entry_complement(entry: Any) -> Any:
    """What a property's value is when it fails a ``properties`` entry; None: not said here.

    For an entry of named values (``const``, ``enum``), their ``not``, which
    :func:`~grammar_guard.core.schema.property_negations.values_decided`
    writes out once merged with the node's own entry; for an entry of types
    alone, the other types.
    """
    if not isinstance(entry, dict) or not all(
        key in ("const", "enum", "type") or key in ANNOTATIONS for key in entry
    ):
        return None
    if entry.keys() & {"const", "enum"}:
        return {"not": entry}
    if "type" not in entry:
        return None
    others = types_outside(entry["type"])
    if not others:
        return None  # a malformed type, or one that every value has
    return {"type": list(others) if len(others) > 1 else others[0]}


def _identity(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value, sort_keys=True)}"


def _required(name: str) -> str:
    return f"required={json.dumps(name)}"


def _object(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", **schema}
