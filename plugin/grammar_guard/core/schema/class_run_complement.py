"""The strings a pattern of one repeated character class does not match, as a pattern.

``^[A-Fa-f\\d]{24}$`` (an object id), ``^\\d+$``, ``^[a-z_]*$``: a whole
string of some class, so many times. Its complement is exact and regular:
the strings too short, those too long, and those holding a character
outside the class anywhere::

    ^(?:ANY{0,23}|ANY{25,}|ANY*[^A-Fa-f\\d]ANY*)$

A ``not`` of such a pattern, or a ``oneOf`` of it and any string, asks for
that (:mod:`boolean_forms` writes it as a literal's complement). Only this
shape is read: anchored at both ends, one class (``[...]``, ``[^...]``, a
class escape, or one literal character), once or in a group, with a greedy
quantifier; anything else has no complement here.
"""

from __future__ import annotations

import re

from grammar_guard.core.schema.string_complement import ANY

# Repetition counts read; past them the pattern is left as written (each
# count is a repetition the engines build state for).
MAX_COUNT = 256
# The complement of each class escape, written as a class (ECMA-262's \\d and
# \\w are ASCII): the engines read explicit classes alike.
_CLASS_ESCAPES = {
    "d": "[^0-9]",
    "D": "[0-9]",
    "w": "[^0-9A-Za-z_]",
    "W": "[0-9A-Za-z_]",
}
# One class, maybe in a group, then its quantifier: the whole pattern.
_SHAPE = re.compile(
    r"\^(?:\((?:\?:)?)?"
    r"(?P<unit>\[\^?(?:[^\[\]\\]|\\.)+\]|\\[dDwW]|\\[^A-Za-z0-9]|[A-Za-z0-9 _,;:'\"@#%&=~`<>!/-])"
    r"(?P<close>\))?"
    r"(?P<count>\*|\+|\?|\{\d+\}|\{\d+,\d*\})\$",
    re.DOTALL,
)
_COUNT = re.compile(r"\{(\d+)(,(\d*))?\}")


def run_complement(pattern: str) -> str | None:
    """A pattern matching exactly the strings ``pattern`` does not; None if it is not of the
    one-repeated-class shape (or repeats it past :data:`MAX_COUNT`)."""
    shape = _SHAPE.fullmatch(pattern)
    if shape is None or pattern.startswith("^(") != (shape["close"] is not None):
        return None
    counts = _counts(shape["count"])
    if counts is None:
        return None
    least, most = counts
    outside = _outside(shape["unit"])
    alternatives = []
    if least == 1:
        alternatives.append("")  # the empty string, shorter than one
    elif least > 1:
        alternatives.append(f"{ANY}{{0,{least - 1}}}")
    if most is not None:
        alternatives.append(f"{ANY}{{{most + 1},}}")
    alternatives.append(f"{ANY}*{outside}{ANY}*")
    return f"^(?:{'|'.join(alternatives)})$"


def _counts(quantifier: str) -> tuple[int, int | None] | None:
    """The least and most repetitions ``quantifier`` allows (None: no most)."""
    fixed = {"*": (0, None), "+": (1, None), "?": (0, 1)}
    if quantifier in fixed:
        return fixed[quantifier]
    bounds = _COUNT.fullmatch(quantifier)
    if bounds is None:
        return None
    least = int(bounds[1])
    most = least if bounds[2] is None else (int(bounds[3]) if bounds[3] else None)
    if least > MAX_COUNT or (most is not None and (most > MAX_COUNT or most < least)):
        return None
    return least, most


def _outside(unit: str) -> str:
    """The characters ``unit`` (a class, a class escape or a literal) does not match."""
    if unit.startswith("[^"):
        body = unit[2:]
        # "[^^]" leaves "^", which must not open the class as a negation.
        return f"[\\{body}" if body.startswith("^") else f"[{body}"
    if unit.startswith("["):
        return f"[^{unit[1:]}"
    if unit[0] == "\\" and unit[1] in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[unit[1]]
    return f"[^{unit}]"
