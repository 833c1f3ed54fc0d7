"""The range of values a family of bound keywords leaves, as an :class:`Interval`.

Numbers have ``minimum``, ``maximum`` and their exclusive forms; strings,
arrays and objects a least and a greatest length or count. Each family
leaves one interval of values (:data:`BOUND_FAMILIES`), and two schemas
whose intervals are disjoint share no value of the family's types.
Kept apart from :mod:`~grammar_guard.core.schema.facts`, which gathers a
schema's bounds with those of its parts and compares two schemas: the
interval arithmetic reads no schema.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from grammar_guard.core.schema.values import is_number


class Interval(NamedTuple):
    """The numbers a bound keyword family leaves: from ``low`` to ``high``, each end open or not."""

    low: float
    low_open: bool
    high: float
    high_open: bool

    def tightened(self, low: Any, low_open: bool, high: Any, high_open: bool) -> Interval:
        """This interval within the bounds given (a bound that is no number says nothing)."""
        result = self
        if is_number(low) and (low > result.low or (low == result.low and low_open)):
            result = result._replace(low=low, low_open=low_open)
        if is_number(high) and (high < result.high or (high == result.high and high_open)):
            result = result._replace(high=high, high_open=high_open)
        return result

    def disjoint(self, other: Interval) -> bool:
        def below(first: Interval, second: Interval) -> bool:
            return first.high < second.low or (
                first.high == second.low and (first.high_open or second.low_open)
            )

        return below(self, other) or below(other, self)


EVERY_NUMBER = Interval(-math.inf, False, math.inf, False)
# The bounds of each type family: (types, lower, upper, exclusive lower, exclusive upper).
# Values of other types pass them whatever they say, so ranges tell two
# schemas apart only where every value both allow is of the family's types.
BOUND_FAMILIES: tuple[tuple[frozenset[str], str, str, str | None, str | None], ...] = (
    (
        frozenset({"integer", "number"}),
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    ),
    (frozenset({"string"}), "minLength", "maxLength", None, None),
    (frozenset({"array"}), "minItems", "maxItems", None, None),
    (frozenset({"object"}), "minProperties", "maxProperties", None, None),
)
