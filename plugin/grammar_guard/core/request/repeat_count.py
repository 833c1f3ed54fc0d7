"""A client's repetition count (``{n}`` in a regex or pattern) as a number that stays small.

Python refuses to convert more than 4,300 digits to an int (a ``ValueError``
whose text names ``sys.set_int_max_str_digits``), and a count of a few
hundred digits overflows a float in any estimate built on it. Nothing the
plugin decides needs more than "at least this large", so a count is read
from its first digits and held at :data:`REPEAT_COUNT_CAP`.
"""

from __future__ import annotations

# Far past any count an engine compiles (xgrammar unrolls a repetition, and
# llguidance refuses counts this large), and far below a float's range even
# when summed over every repetition of a 1 MiB spec.
REPEAT_COUNT_CAP = 1 << 31
# More digits than this is past the cap whatever they are.
_CAP_DIGITS = len(str(REPEAT_COUNT_CAP))


def repeat_count(digits: str) -> int:
    """``digits`` (ASCII digits, as a regex's ``\\d+`` matched them) as an int, at most the cap."""
    significant = digits.lstrip("0")
    if len(significant) > _CAP_DIGITS:
        return REPEAT_COUNT_CAP
    return min(int(significant or "0"), REPEAT_COUNT_CAP)
