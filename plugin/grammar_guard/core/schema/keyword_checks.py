"""Checks of single keywords against what an engine enforces of them.

Each check reads one schema object and says why a keyword there would not be
enforced; the analysis decides where to look and records what these find.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

from grammar_guard.core.schema.capabilities import EngineCapabilities, MultipleOfSupport
from grammar_guard.core.schema.regex_scan import pattern_problems
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import is_number

# Keywords the analysis reasons about one by one when a schema is read by its
# type; any other constraining keyword there is reported as not enforced.
ANALYSED_KEYWORDS = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "prefixItems",
        "unevaluatedItems",
        "minItems",
        "maxItems",
        "minContains",  # reported on "contains"
        "maxContains",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
    }
)
# The numeric bounds, which a float-based engine reads as 64-bit floats.
NUMBER_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_INT64 = range(-(2**63), 2**63)


def multiple_of_problem(
    node: Mapping[str, Any], produced: frozenset[str], support: MultipleOfSupport
) -> str | None:
    """Why the ``multipleOf`` of ``node`` is not enforced on the ``produced`` types; None: it is."""
    divisor = node["multipleOf"]
    if not is_number(divisor) or divisor <= 0:
        return None  # invalid schema; the engine refuses it
    if "number" in produced and not support.number:
        return "multipleOf is not enforced on type number"
    if "integer" not in produced or divisor == 1:
        return None
    if not support.integer:
        return "multipleOf is not enforced on type integer"
    if isinstance(divisor, float) and not divisor.is_integer():
        return "a fractional multipleOf is not enforced on type integer"
    if support.integer_max_divisor is not None and divisor > support.integer_max_divisor:
        return f"multipleOf above {support.integer_max_divisor} is not enforced"
    if support.integer_max_range is None:
        return None
    low, high = _integer_range(node)
    if (low is None) != (high is None):
        return "multipleOf with a bound on one side only is not enforced"
    if low is not None and high is not None and high - low + 1 > support.integer_max_range:
        return (
            f"multipleOf over a range of more than {support.integer_max_range} integers "
            "is not enforced"
        )
    return None


def string_problems(
    node: Mapping[str, Any], caps: EngineCapabilities
) -> Iterator[tuple[str, str, str | None]]:
    """Each string keyword of ``node`` the engine would not enforce: (keyword, reason, value).

    A format the engine replaces by its own regex shadows ``pattern`` and the
    lengths next to it, and a pattern may shadow the lengths: the engine then
    reads the shadowing keyword only.
    """
    shadowed: dict[str, str] = {}
    fmt = node.get("format")
    if "format" in node:
        if not (isinstance(fmt, str) and fmt in caps.exact_formats):
            yield "format", "this format is not enforced exactly by the engine", str(fmt)
        if isinstance(fmt, str) and fmt in caps.formats_shadowing_string_keywords:
            shadowed.update(dict.fromkeys(("pattern", "minLength", "maxLength"), f"format '{fmt}'"))
    if "pattern" in node and "pattern" not in shadowed:
        pattern = node["pattern"]
        problems = pattern_problems(pattern, caps.pattern) if isinstance(pattern, str) else []
        if problems:
            yield "pattern", "; ".join(problems), None
        if caps.pattern_shadows_lengths:
            shadowed.update(dict.fromkeys(("minLength", "maxLength"), "pattern"))
    for key in ("pattern", "minLength", "maxLength"):
        if key not in node or not can_fail(key, node[key], node):
            continue
        if key in shadowed:
            yield key, f"ignored next to {shadowed[key]}", None
        elif key != "pattern" and not caps.string_lengths:
            yield key, "not enforced here", None


def ref_problem(ref: str, embedded: bool, caps: EngineCapabilities) -> str | None:
    """Why the engine would not resolve ``$ref: ref`` as JSON Schema does; None: it would.

    ``embedded``: the reference sits inside a subschema with its own ``$id``.
    """
    if embedded and not caps.embedded_resources:
        return (
            "inside a subschema with its own $id the engine resolves it against "
            "the document root, not that subschema"
        )
    if ref != "#" and not ref.startswith("#/"):
        if ref.startswith("#"):
            supported, what = caps.ref_anchors, "a reference to an anchor"
        else:
            supported, what = caps.ref_remote, "a reference to another document"
        if supported:
            return None
        return (
            f"{what} is not resolved (the engine accepts any JSON value there); "
            "grammar-guard never fetches schemas"
        )
    tokens = ref[2:].split("/") if ref != "#" else []
    if not caps.ref_pointer_escapes and any(t == "" or "~" in t or "%" in t for t in tokens):
        return "a JSON pointer with escapes or empty segments is not resolved correctly"
    return None


def rounded_by_float(value: Any) -> bool:
    """Whether a bound read as a 64-bit float would be a different number."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False  # floats came from JSON as doubles and go back exactly
    try:
        return float(value) != value
    except OverflowError:
        return True


def holds_wide_integer(value: Any) -> bool:
    """Whether a JSON value holds an integer outside the 64-bit range (at any depth)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and item not in _INT64:
            return True
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
    return False


def admits_other_properties(node: Mapping[str, Any]) -> bool:
    """Whether an object schema lets in properties it does not list (beyond patterns)."""
    if "additionalProperties" in node:
        return node["additionalProperties"] is not False
    return "unevaluatedProperties" in node and node["unevaluatedProperties"] is not False


def plainly_string_schema(value: Any) -> bool:
    """A propertyNames schema the engine builds as string keys, whatever it is cached as."""
    if not isinstance(value, dict):
        return False
    if "$ref" in value or "anyOf" in value or "oneOf" in value or "allOf" in value:
        return False
    if "const" in value:
        return isinstance(value["const"], str)
    if "enum" in value:
        return isinstance(value["enum"], list) and all(isinstance(v, str) for v in value["enum"])
    declared = value.get("type")
    if declared == "string":
        return True
    if declared is not None:
        return False
    return any(key in value for key in ("pattern", "minLength", "maxLength", "format"))


def unwritable_range(node: Mapping[str, Any], fraction_digits: int) -> str | None:
    """The lower-bound keyword of a range holding no number with ``fraction_digits`` decimals.

    None when the range holds such a number, is open on a side, or holds
    no number at all (the engine refuses that itself).
    """
    lows = _bounds(node, "minimum", "exclusiveMinimum")
    highs = _bounds(node, "maximum", "exclusiveMaximum")
    if not lows or not highs:
        return None
    low, low_strict, keyword = max(lows)  # on a tie the strict bound is the tighter
    high, high_strict, _ = min(highs, key=lambda bound: (bound[0], not bound[1]))
    if low > high or (low == high and (low_strict or high_strict)):
        return None
    step = Fraction(1, 10**fraction_digits)
    first = math.ceil(low / step) * step
    if first == low and low_strict:
        first += step
    return None if first < high or (first == high and not high_strict) else keyword


def _bounds(
    node: Mapping[str, Any], inclusive: str, exclusive: str
) -> list[tuple[Fraction, bool, str]]:
    """One side's bounds, exactly as written (not as floats): (value, strict, keyword)."""
    return [
        (
            Fraction(Decimal(repr(value)) if isinstance(value, float) else value),
            key == exclusive,
            key,
        )
        for key in (inclusive, exclusive)
        if is_number(value := node.get(key))
    ]


def _integer_range(node: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive integer range the bounds of an integer schema leave (None: unbounded)."""
    lows, highs = [], []
    for key, side, strict in (
        ("minimum", lows, False),
        ("exclusiveMinimum", lows, True),
        ("maximum", highs, False),
        ("exclusiveMaximum", highs, True),
    ):
        value = node.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if not is_number(value):
            continue
        if side is lows:
            side.append(math.floor(value) + 1 if strict else math.ceil(value))
        else:
            side.append(math.ceil(value) - 1 if strict else math.floor(value))
    return (max(lows) if lows else None, min(highs) if highs else None)
