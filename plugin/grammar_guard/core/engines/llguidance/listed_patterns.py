"""``patternProperties`` entries that can only name listed properties, folded into them.

llguidance 1.7 builds a closed object's grammar with a branch for "one more
property" whenever the object has a ``patternProperties`` entry whose schema
is not ``false``. The key of that branch must match one of the patterns and
be no name ``properties`` lists. When every pattern can only match listed
names, no key fits, yet the branch stays: after any property the mask allows
``,``, and after it nothing but the end token, which the matcher then
refuses. A request there ends in an error, or in whitespace up to its token
limit when whitespace is free.

Such an entry adds nothing but its schema to the names it matches, so it is
written there instead, in an ``allOf`` with the property's own schema: JSON
Schema accepts the same values, and the dead branch is gone.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.request.repeat_count import repeat_count
from grammar_guard.core.schema.vocabulary import every_schema

# ECMA-262's syntax characters: any other character outside a class stands
# for itself, and these do so only escaped (as does "/").
_SYNTAX = frozenset("^$\\.*+?()[]{}|")
_ESCAPABLE = _SYNTAX | {"/", "-"}


class _Unlisted(Exception):
    """The pattern matches strings no listed name can be, or is not read here."""


def listed_names(pattern: str, names: frozenset[str]) -> frozenset[str] | None:
    """Every string ``pattern`` matches, if it matches only strings of ``names``; else None.

    Only a pattern anchored at both ends can (a JSON-Schema pattern is
    searched for anywhere in a name). Between the anchors this reads literal
    characters, escaped punctuation, groups, alternatives, character classes
    of literal characters and ranges, ``?`` and ``{n}`` or ``{n,m}``; a pattern
    with anything else (``.``, ``\\d``, ``*``, a lookaround) gets None, which
    leaves it as it is.
    """
    if not (pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$")):
        return None
    reader = _Reader(pattern[1:-1], names)
    try:
        # One sequence, not alternatives: in "^a|b$" each anchor binds to one
        # side only, and the pattern matches every name starting with "a".
        matched = reader.sequence()
        if reader.pos != len(reader.text):
            return None  # a "|" or ")" at the top
    except _Unlisted:
        return None
    return frozenset(matched) if matched <= names else None


class _Reader:
    """Reads a pattern into the strings it matches.

    It gives up as soon as it holds more strings than there are names, or
    one longer than the longest name: such a pattern matches some unlisted
    name, and a pattern with very many or very long strings ends quickly.
    """

    def __init__(self, text: str, names: frozenset[str]) -> None:
        self.text = text
        self.pos = 0
        self.limit = len(names)
        self.longest = max(map(len, names), default=0)

    def bounded(self, strings: set[str]) -> set[str]:
        if len(strings) > self.limit or any(len(item) > self.longest for item in strings):
            raise _Unlisted
        return strings

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise _Unlisted
        self.pos += 1
        return char

    def alternation(self) -> set[str]:
        strings = self.sequence()
        while self.peek() == "|":
            self.pos += 1
            strings = self.bounded(strings | self.sequence())
        return strings

    def sequence(self) -> set[str]:
        strings = {""}
        while self.peek() not in ("", "|", ")"):
            strings = self.concatenated(strings, self.repeated(self.atom()))
        return strings

    def concatenated(self, heads: set[str], tails: set[str]) -> set[str]:
        return self.bounded({head + tail for head in heads for tail in tails})

    def atom(self) -> set[str]:
        char = self.take()
        if char == "(":
            if self.text.startswith("?:", self.pos):
                self.pos += 2
            elif self.peek() == "?":
                raise _Unlisted  # a lookaround or a named group
            strings = self.alternation()
            if self.take() != ")":
                raise _Unlisted
            return strings
        if char == "[":
            return self.char_class()
        if char == "\\":
            return {self.escaped()}
        if char in _SYNTAX:
            raise _Unlisted  # ".", an inner anchor, a quantifier with nothing to repeat
        return {char}

    def escaped(self) -> str:
        char = self.take()
        if char not in _ESCAPABLE:
            raise _Unlisted  # \d, \w, \b, \u...: classes, assertions and codes
        return char

    def char_class(self) -> set[str]:
        if self.peek() in ("^", "]"):
            raise _Unlisted  # negated or empty
        members: set[str] = set()
        while self.peek() != "]":
            low = self.class_member()
            if self.peek() == "-" and self.text[self.pos + 1 : self.pos + 2] not in ("", "]"):
                self.pos += 1
                high = self.class_member()
                if not 0 <= ord(high) - ord(low) < self.limit:
                    raise _Unlisted  # reversed (invalid), or more characters than names
                members |= {chr(code) for code in range(ord(low), ord(high) + 1)}
            else:
                members.add(low)
            self.bounded(members)
        self.pos += 1
        return members

    def class_member(self) -> str:
        char = self.take()
        if char == "\\":
            return self.escaped()
        if char == "[":
            raise _Unlisted  # a nested class (ECMA-262's v flag)
        return char

    def repeated(self, atom: set[str]) -> set[str]:
        low, high = self.quantifier()
        if atom == {""}:
            return atom
        options = {""} if low == 0 else set()
        current = {""}
        # Each round makes the strings longer than the round before, so
        # bounded() stops an unreadable count within the longest name's length.
        for count in range(1, high + 1):
            current = self.concatenated(current, atom)
            if count >= low:
                options = self.bounded(options | current)
        return options

    def quantifier(self) -> tuple[int, int]:
        char = self.peek()
        if char in ("*", "+"):
            raise _Unlisted
        if char == "?":
            self.pos += 1
            low, high = 0, 1
        elif char == "{":
            end = self.text.find("}", self.pos)
            first, comma, second = self.text[self.pos + 1 : end].partition(",")
            if end == -1 or not first.isdigit() or (comma and not second.isdigit()):
                raise _Unlisted  # "{n,}" repeats without bound; "{" alone is not read
            self.pos = end + 1
            low = repeat_count(first)
            high = repeat_count(second) if comma else low
            if low > high:
                raise _Unlisted
        else:
            return 1, 1
        if self.peek() == "?":  # lazy: the same strings
            self.pos += 1
        return low, high


def fold_listed_patterns(schema: Any) -> None:
    """Fold, in place, the pattern entries of ``schema`` that llguidance would leave dead.

    An object is rewritten only where the branch would be dead: it has
    ``additionalProperties: false`` and every pattern entry whose schema is
    not ``false`` matches only names ``properties`` lists. One entry that can
    match another name gives the branch a key, and leaves the object alone.
    """
    for node in every_schema(schema):
        _fold(node)


def _fold(node: dict[str, Any]) -> None:
    properties = node.get("properties")
    patterns = node.get("patternProperties")
    if not (
        node.get("additionalProperties") is False
        and isinstance(properties, dict)
        and isinstance(patterns, dict)
    ):
        return
    declared = frozenset(properties)
    matched: dict[str, list[Any]] = {}
    for pattern, value in patterns.items():
        if value is False:
            continue  # llguidance gives a false entry no branch
        names = listed_names(pattern, declared)
        if names is None:
            return
        for name in names:
            matched.setdefault(name, []).append(value)
    if not matched:
        return
    for name, values in matched.items():
        properties[name] = {"allOf": [properties[name], *values]}
    kept = {pattern: value for pattern, value in patterns.items() if value is False}
    if kept:
        node["patternProperties"] = kept
    else:
        del node["patternProperties"]
