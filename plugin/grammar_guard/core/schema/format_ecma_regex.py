"""The ``regex`` format: the regular part of ECMA-262 patterns, as one exact pattern.

The ``regex`` entry of :data:`~grammar_guard.core.schema.formats.FORMAT_PATTERNS`:
patterns valid with and without the ``u`` flag, groups nested a few levels
deep (what it leaves out, and why: the docstring of
:mod:`~grammar_guard.core.schema.formats`). A grammar of its own, written
from the pieces of :mod:`~grammar_guard.core.schema.format_pieces`.
"""

from __future__ import annotations

from grammar_guard.core.schema.format_pieces import HEXDIG, class_except, grouped, optional

# --- ECMA-262 patterns, a regular part of them -----------------------------

# Valid in both ECMA-262 grammars (with and without the "u" flag): the
# escapes of a syntax character or "/", the class escapes, the control
# escapes, \cX, \xHH and \uHHHH.
_REGEX_SYNTAX = "[\\^$\\\\.*+?()\\[\\]{}|/]"
_REGEX_ESCAPE_TAIL = grouped(
    "[dDsSwWfnrtv]", _REGEX_SYNTAX, "c[A-Za-z]", f"x{HEXDIG}{{2}}", f"u{HEXDIG}{{4}}"
)
_REGEX_ESCAPE = "\\\\" + _REGEX_ESCAPE_TAIL
# In a class "\b" is a backspace and "\-" a hyphen; range ends are letters or
# digits of one run, in order ("z-a" is an error, and so is "\d-z" with "u").
_CLASS_ATOM = grouped(class_except("\\]-"), "\\\\" + grouped(_REGEX_ESCAPE_TAIL, "[b\\-]"))
_CLASS_RANGE = grouped(
    *(
        f"{first}\\-[{first}-{run[-1]}]"
        for run in ("0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        for first in run
    )
)
# A hyphen of its own only first or last, where no grammar reads a range.
_REGEX_CLASS = "\\[\\^{0,1}\\-{0,1}" + grouped(_CLASS_RANGE, _CLASS_ATOM) + "*\\-{0,1}\\]"
_ORDERED_COUNTS = grouped(*(f"{low},[{low}-9]" for low in range(10)), "[0-9],[1-9][0-9]{1,3}")
_QUANTIFIER = grouped("[*+?]", "\\{" + grouped("[0-9]{1,4},{0,1}", _ORDERED_COUNTS) + "\\}")
_REGEX_ATOM = grouped(class_except("\\^$.*+?()[]{}|"), "\\.", _REGEX_ESCAPE, _REGEX_CLASS)
_REGEX_ASSERTION = grouped("\\^", "\\$", "\\\\[bB]")
_REGEX_GROUP_DEPTH = 3


def regex() -> str:
    """ECMA-262 ``Pattern``s with groups nested at most ``_REGEX_GROUP_DEPTH`` deep.

    A disjunction is written as terms and bars in any order: the same strings
    as alternatives of terms, with each level written once (alternatives
    spelled out would double the pattern at every level). A lookaround holds
    no group, as lookarounds are never quantified and so need a term of their
    own at each level.
    """

    def disjunction(term: str) -> str:
        return grouped(term, "\\|") + "*"

    def quantified(atom: str) -> str:
        return atom + optional(_QUANTIFIER + "\\?{0,1}")

    flat = disjunction(grouped(_REGEX_ASSERTION, quantified(_REGEX_ATOM)))
    lookaround = "\\(\\?<{0,1}[=!]" + flat + "\\)"
    nested = flat
    for _ in range(_REGEX_GROUP_DEPTH):
        group = "\\(" + optional("\\?:") + nested + "\\)"
        nested = disjunction(
            grouped(_REGEX_ASSERTION, lookaround, quantified(grouped(_REGEX_ATOM, group)))
        )
    return nested
