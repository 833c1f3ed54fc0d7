"""Of what a pattern's characters and classes match, the characters JSON escapes.

A quote, a backslash and U+0000-U+001F are written as escapes in JSON text,
so an engine that matches a pattern against the raw text treats them apart:
:mod:`~grammar_guard.core.schema.regex_scan` asks, of each character,
escape and class it reads, which of them it matches (:class:`Chars`), and
of each member of a class, whether it holds any. Kept apart from the
scanner, which reads the pattern's syntax: this module reads code points.
"""

from __future__ import annotations

from dataclasses import dataclass

# Characters JSON writes escaped: a pattern that matches them literally makes
# an engine that matches the raw JSON text write them unescaped.
JSON_SPECIAL = frozenset({0x22, 0x5C, *range(0x20)})
# U+0000-U+001F as bits: which control characters a pattern can match.
ALL_CONTROLS = (1 << 0x20) - 1
_SPACE_CONTROLS = sum(1 << code for code in range(0x09, 0x0E))  # \t \n \v \f \r
DOT_CONTROLS = ALL_CONTROLS & ~(1 << 0x0A) & ~(1 << 0x0D)  # "." is not a line end
# Unicode properties whose characters include the control characters.
_CONTROL_PROPERTIES = frozenset({"C", "Cc", "Other", "Control"})
# Unicode properties whose characters include the quote and the backslash (Po).
_PUNCTUATION_PROPERTIES = frozenset({"P", "Po", "Punctuation", "Other_Punctuation"})


@dataclass(frozen=True)
class Chars:
    """Of what one class or character of a pattern matches, the part JSON escapes."""

    controls: int = 0  # bit n: U+00nn
    quote: bool = False
    backslash: bool = False

    def __or__(self, other: Chars) -> Chars:
        return Chars(
            self.controls | other.controls,
            self.quote or other.quote,
            self.backslash or other.backslash,
        )

    def complement(self) -> Chars:
        return Chars(ALL_CONTROLS & ~self.controls, not self.quote, not self.backslash)


def code_chars(code: int) -> Chars:
    return Chars(1 << code if code < 0x20 else 0, code == 0x22, code == 0x5C)


def range_chars(low: int, high: int) -> Chars:
    controls = 0
    if low < 0x20:
        top = min(high, 0x1F)
        controls = ((1 << (top + 1)) - 1) & ~((1 << low) - 1)
    return Chars(controls, low <= 0x22 <= high, low <= 0x5C <= high)


ESCAPE_CHARS = {
    "d": Chars(),
    "w": Chars(),
    "s": Chars(_SPACE_CONTROLS),
    "D": Chars(ALL_CONTROLS, True, True),
    "W": Chars(ALL_CONTROLS, True, True),
    "S": Chars(ALL_CONTROLS & ~_SPACE_CONTROLS, True, True),
}


def property_chars(negated: bool, name: str) -> Chars:
    """What ``\\p{name}`` (``\\P`` when ``negated``) matches of what JSON escapes, roughly.

    Rough towards more control characters and no quote: the reading only
    decides whether a pattern is refused on an engine, never what it accepts.
    """
    value = name.rpartition("=")[2]
    if not negated:
        return Chars(ALL_CONTROLS if value in _CONTROL_PROPERTIES else 0)
    if value in _CONTROL_PROPERTIES:
        return Chars(0, True, True)
    punctuation = value in _PUNCTUATION_PROPERTIES
    return Chars(ALL_CONTROLS, not punctuation, not punctuation)


def describe_char(char: str) -> str:
    if char == '"':
        return "a double quote"
    if char == "\\":
        return "a backslash"
    return f"the control character U+{ord(char):04X}"


def has_plain_char(member: tuple[int, int] | Chars) -> bool:
    if isinstance(member, Chars):
        return True  # \\d, \\w, \\s and their negations all hold plain characters
    low, high = member
    # Only 34 code points are special, so a longer range always has a plain one.
    return any(code not in JSON_SPECIAL for code in range(low, min(high, low + 40) + 1))


def holds_special(member: tuple[int, int] | Chars) -> bool:
    if isinstance(member, Chars):
        return False  # \d and \w hold none; \s is written out as its members first
    return member[0] < 0x20 or holds_quote_or_backslash(member)


def holds_quote_or_backslash(member: tuple[int, int] | Chars) -> bool:
    if isinstance(member, Chars):
        return False  # measured: [^\W] and [^\D] keep both out
    low, high = member
    return low <= 0x22 <= high or low <= 0x5C <= high
