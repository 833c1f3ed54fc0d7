"""JSON values as JSON Schema sees them: their types, their equality, and
whether one satisfies a keyword."""

from __future__ import annotations

import decimal
from typing import Any

from grammar_guard.core.schema.vocabulary import KEYWORD_TYPES, TYPE_KINDS


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_set(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return expand_number(frozenset({value}))
    if isinstance(value, list):
        return expand_number(frozenset(v for v in value if isinstance(v, str)))
    return frozenset()


def type_names(value: Any) -> tuple[str, ...] | None:
    """A ``type`` value's names; None if it is not one (an unknown name, an empty list)."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        return None
    if not all(isinstance(name, str) and name in TYPE_KINDS for name in names):
        return None
    return tuple(names)


def expand_number(types: frozenset[str]) -> frozenset[str]:
    # "number" includes the integers; an integer-typed value is a number too.
    return types | {"integer"} if "number" in types else types


def json_type(value: Any) -> str:
    """The JSON Schema type of a value (1.0 is an integer, as 2020-12 says)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(left: Any, right: Any) -> bool:
    """JSON Schema equality: numbers by value, objects regardless of key order."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if is_number(left) and is_number(right):
        return bool(left == right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def _as_decimal(value: float | int) -> decimal.Decimal:
    return decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)


def satisfies(value: Any, keyword: str, argument: Any) -> bool | None:
    """Whether ``value`` satisfies ``keyword: argument``; None where this cannot tell."""
    applies_to = KEYWORD_TYPES.get(keyword)
    kind = json_type(value)
    if applies_to is not None and not ({kind, "number"} if kind == "integer" else {kind}) & (
        applies_to | ({"number"} if "integer" in applies_to else set())
    ):
        return True  # the keyword does not constrain values of this type
    try:
        if keyword == "type":
            allowed = type_set(argument)
            return kind in allowed or (kind == "integer" and "number" in allowed)
        if keyword == "const":
            return json_equal(value, argument)
        if keyword == "enum":
            return isinstance(argument, list) and any(json_equal(value, v) for v in argument)
        if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not is_number(argument):
                return None
            x, bound = _as_decimal(value), _as_decimal(argument)
            return {
                "minimum": x >= bound,
                "maximum": x <= bound,
                "exclusiveMinimum": x > bound,
                "exclusiveMaximum": x < bound,
            }[keyword]
        if keyword == "multipleOf":
            if not is_number(argument) or argument <= 0:
                return None
            return _as_decimal(value) % _as_decimal(argument) == 0
        if keyword in ("minLength", "maxLength", "minItems", "maxItems"):
            if not is_number(argument):
                return None
            size = len(value)  # code points for strings, as JSON Schema counts
            return size >= argument if keyword.startswith("min") else size <= argument
        if keyword in ("minProperties", "maxProperties"):
            if not is_number(argument):
                return None
            return len(value) >= argument if keyword == "minProperties" else len(value) <= argument
        if keyword == "required":
            return isinstance(argument, list) and all(name in value for name in argument)
        if keyword == "uniqueItems":
            if argument is not True:
                return True
            return len({canonical(item) for item in value}) == len(value)
    except (decimal.InvalidOperation, TypeError, ValueError, OverflowError):
        return None
    return None


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema equality (1 == 1.0, key order free)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if is_number(value):
        try:
            return ("number", _as_decimal(value).normalize())
        except decimal.InvalidOperation:
            return ("number", repr(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(canonical(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


def count_values(document: Any, limit: int | None = None) -> int:
    """How many JSON values ``document`` writes out, counting at most to ``limit`` + 1.

    A rewritten schema shares merged references rather than copying them, so
    its written size may be far larger than its objects suggest.
    """
    count = 0
    pending = [document]
    while pending and (limit is None or count <= limit):
        item = pending.pop()
        count += 1
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count
