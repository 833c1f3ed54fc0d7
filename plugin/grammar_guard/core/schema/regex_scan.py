"""Which features of an ECMA-262 ``pattern`` an engine would not honour.

Read by a lenient scanner of its own rather than by Python's ``re``: JSON
Schema patterns are ECMA-262, and what matters is not whether a pattern
compiles but whether it uses lookarounds, inner anchors, ``\\S`` or
characters JSON must escape.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass, field

from grammar_guard.core.schema.capabilities import PatternSupport
from grammar_guard.core.schema.json_escaped_chars import (
    ALL_CONTROLS,
    DOT_CONTROLS,
    ESCAPE_CHARS,
    JSON_SPECIAL,
    Chars,
    code_chars,
    describe_char,
    has_plain_char,
    holds_quote_or_backslash,
    holds_special,
    property_chars,
    range_chars,
)

_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_CLASS_ESCAPES = frozenset("dDwWsS")
# Read where they start and no further, so that a text of unclosed braces or
# angle brackets costs one pass, not one search to its end per opening.
_BOUNDS = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")
_GROUP_NAME = re.compile(r"\?<[^>()|]*>")
_CODE_POINT = re.compile(r"\{([0-9A-Fa-f]{1,8})\}")


@dataclass
class _Node:
    kind: str  # "start", "end", "atom", "group", "lookaround"
    quantified: bool = False
    alternatives: list[list[_Node]] = field(default_factory=list)


class _RegexScan:
    """A lenient ECMA-262 pattern reader that notes the features the analysis cares about.

    Syntax it does not understand is read as literal text: whatever the
    engine then does with it, it refuses (a parse error) or over-constrains.
    """

    MAX_DEPTH = 100

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.depth = 0
        self.problems: dict[str, str] = {}  # kind -> the first message of that kind
        # A class listing characters JSON escapes beside plain ones: enforced,
        # but an engine matching raw JSON text drops those members.
        self.drops_specials = False
        # The control characters matched by the parts of the pattern that leave
        # out the quote or the backslash. Where the characters one place takes
        # are all of U+0000-U+001F and not both of those, an engine may let the
        # two through; such a place is made of these parts alone, so once they
        # hold every control character, some place may (a sound overestimate).
        self.controls_without_escapes = 0

    def matches(self, chars: Chars) -> None:
        if not (chars.quote and chars.backslash):
            self.controls_without_escapes |= chars.controls

    def note(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, message)

    def parse(self) -> list[list[_Node]]:
        alternatives = self.alternation()
        while self.pos < len(self.text):  # a stray ")"
            self.pos += 1
            alternatives[-1].append(_Node("atom"))
            alternatives[-1].extend(self.sequence())
        if self.controls_without_escapes == ALL_CONTROLS:
            self.note(
                "every_control",
                "it matches every control character (U+0000-U+001F) where it does not match "
                "a quote or a backslash, and the engine then lets their escapes through too",
            )
        return alternatives

    def alternation(self) -> list[list[_Node]]:
        alternatives = [self.sequence()]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            alternatives.append(self.sequence())
        return alternatives

    def sequence(self) -> list[_Node]:
        items: list[_Node] = []
        while self.pos < len(self.text) and self.text[self.pos] not in "|)":
            node = self.term()
            if node is not None:
                if self.quantifier():
                    node.quantified = True
                items.append(node)
        return items

    def quantifier(self) -> bool:
        text, start = self.text, self.pos
        if start >= len(text):
            return False
        if text[start] in "*+?":
            self.pos += 1
        elif text[start] == "{":
            bounds = _BOUNDS.match(text, start)
            if bounds is None:
                return False  # a literal brace
            self.pos = bounds.end()
        else:
            return False
        if self.pos < len(text) and text[self.pos] in "?+":  # lazy / possessive
            self.pos += 1
        return True

    def term(self) -> _Node | None:
        char = self.text[self.pos]
        if char == "^":
            self.pos += 1
            return _Node("start")
        if char == "$":
            self.pos += 1
            return _Node("end")
        if char == "(":
            return self.group()
        if char == "[":
            self.matches(self.char_class())
            return _Node("atom")
        if char == "\\":
            if self.text.startswith(("\\b", "\\B"), self.pos):  # a word boundary
                self.pos += 2
                return _Node("atom")
            read = self.escape(in_class=False)
            self.matches(read if isinstance(read, Chars) else code_chars(read))
            return _Node("atom")
        self.pos += 1
        if char == ".":
            self.matches(Chars(DOT_CONTROLS, True, True))
        else:
            self.matches(code_chars(ord(char)))
            if ord(char) in JSON_SPECIAL:
                self.note_special(char)
        return _Node("atom")

    def group(self) -> _Node:
        text = self.text
        self.pos += 1
        kind = "group"
        if text.startswith("?=", self.pos) or text.startswith("?!", self.pos):
            kind = "lookaround"
            self.pos += 2
        elif text.startswith("?<=", self.pos) or text.startswith("?<!", self.pos):
            kind = "lookaround"
            self.pos += 3
        elif text.startswith("?:", self.pos):
            self.pos += 2
        elif text.startswith("?<", self.pos):
            name = _GROUP_NAME.match(text, self.pos)
            self.pos = name.end() if name else self.pos + 2
        if kind == "lookaround":
            self.note("lookaround", "lookahead and lookbehind assertions are not enforced")
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            self.note("depth", "groups are nested too deeply to analyse")
            self.pos = len(text)
            return _Node(kind)
        alternatives = self.alternation()
        self.depth -= 1
        if self.pos < len(text) and text[self.pos] == ")":
            self.pos += 1
        return _Node(kind, alternatives=alternatives)

    def escape(self, *, in_class: bool) -> int | Chars:
        """Read an escape: the code point it writes, or what its class matches."""
        text = self.text
        self.pos += 1
        if self.pos >= len(text):
            return 0x5C
        char = text[self.pos]
        self.pos += 1
        if char in _CLASS_ESCAPES:
            if char == "S" and not in_class:
                self.note_unicode_whitespace("\\S")
            return ESCAPE_CHARS[char]
        if char in ("p", "P") and self.pos < len(text) and text[self.pos] == "{":
            end = text.find("}", self.pos)
            name_end = end if end != -1 else len(text)
            name = text[self.pos + 1 : name_end]
            self.pos = name_end + 1
            return property_chars(char == "P", name)
        if char in _SIMPLE_ESCAPES and not (char == "0" and self.peek_digit()):
            code = _SIMPLE_ESCAPES[char]
        elif char == "b":
            code = 0x08  # in a class; outside one, term() reads a word boundary
        elif char == "c" and self.pos < len(text) and text[self.pos].isalpha():
            code = ord(text[self.pos]) % 32
            self.pos += 1
        elif char == "x" and _is_hex(text[self.pos : self.pos + 2], 2):
            code = int(text[self.pos : self.pos + 2], 16)
            self.pos += 2
        elif char == "u" and (point := _CODE_POINT.match(text, self.pos)):
            code = int(point.group(1), 16)
            self.pos = point.end()
        elif char == "u" and _is_hex(text[self.pos : self.pos + 4], 4):
            code = int(text[self.pos : self.pos + 4], 16)
            self.pos += 4
        else:
            code = ord(char)  # an identity escape: the character itself
        if code in JSON_SPECIAL and not in_class:
            self.note_special(chr(code))
        return code

    def peek_digit(self) -> bool:
        return self.pos < len(self.text) and self.text[self.pos].isdigit()

    def char_class(self) -> Chars:
        """Read a class; returns what it matches of the characters JSON escapes."""
        text = self.text
        self.pos += 1
        negated = self.pos < len(text) and text[self.pos] == "^"
        if negated:
            self.pos += 1
        members: list[tuple[int, int] | Chars] = []  # code-point ranges and class escapes
        while self.pos < len(text) and text[self.pos] != "]":
            low = self.class_atom(negated)
            if (
                isinstance(low, int)
                and self.pos + 1 < len(text)
                and text[self.pos] == "-"
                and text[self.pos + 1] != "]"
            ):
                self.pos += 1
                high = self.class_atom(negated)
                if isinstance(high, int):
                    members.append((low, high))
                else:  # "[a-\\d]": "a", "-" and the class
                    members.extend(((low, low), (0x2D, 0x2D), high))
            else:
                members.append((low, low) if isinstance(low, int) else low)
        if self.pos < len(text):
            self.pos += 1  # the closing "]"
        named = functools.reduce(
            operator.or_,
            (member if isinstance(member, Chars) else range_chars(*member) for member in members),
            Chars(),
        )
        if negated:
            if any(holds_quote_or_backslash(member) for member in members):
                self.note(
                    "negated_escape",
                    "a negated class that leaves out a quote or a backslash lets them "
                    "through (the engine writes their JSON escapes whatever the class says)",
                )
            return named.complement()
        # A class with at least one member JSON writes unescaped is matched
        # against those members only; one made of specials only is not
        # (measured: "[\\t ]" never yields a raw tab, "[\\t]" does).
        if not any(holds_special(member) for member in members):
            return named
        if any(has_plain_char(member) for member in members):
            self.drops_specials = True
        else:
            self.note(
                "json_special",
                "it matches characters JSON must escape (a quote, a backslash or a "
                "control character), which the engine would write unescaped",
            )
        return named

    def class_atom(self, negated: bool) -> int | Chars:
        text = self.text
        if text[self.pos] == "\\":
            read = self.escape(in_class=True)
            if isinstance(read, Chars):
                escape = text[self.pos - 1]
                if (escape == "s" and negated) or (escape == "S" and not negated):
                    self.note_unicode_whitespace("[^\\s]" if negated else "[\\S]")
            return read
        self.pos += 1
        return ord(text[self.pos - 1])

    def note_special(self, char: str) -> None:
        self.note(
            "json_special",
            f"it matches {describe_char(char)} literally, which the engine would write "
            "unescaped (invalid JSON)",
        )

    def note_unicode_whitespace(self, what: str) -> None:
        self.note(
            "unicode_whitespace",
            f"{what} lets Unicode spaces through (the engine's \\s is ASCII-only, "
            "ECMA-262's is not)",
        )


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdefABCDEF" for c in text)


def _anchor_problems(alternatives: list[list[_Node]], at_start: bool, at_end: bool) -> bool:
    """Whether an anchor sits somewhere it could not match at the start/end of the string."""
    for items in alternatives:
        # Linear: an item has only anchors of its own kind before (after) it
        # iff it sits at or before the first other item (at or after the last).
        first_not_start = next(
            (index for index, item in enumerate(items) if item.kind != "start"), len(items)
        )
        last_not_end = next(
            (index for index in reversed(range(len(items))) if items[index].kind != "end"), -1
        )
        for index, item in enumerate(items):
            before = index <= first_not_start
            after = index >= last_not_end
            if item.kind == "start" and not (at_start and before and not item.quantified):
                return True
            if item.kind == "end" and not (at_end and after and not item.quantified):
                return True
            if item.kind in ("group", "lookaround") and _anchor_problems(
                item.alternatives,
                at_start and before and not item.quantified,
                at_end and after and not item.quantified,
            ):
                return True
    return False


def drops_json_specials(pattern: str) -> bool:
    """Whether ``pattern`` has a class of plain characters and ones JSON escapes.

    xgrammar matches such a class against its plain members only (measured:
    ``[a\\n]`` admits ``"a"`` but not ``"\\n"``, ``[ -~]`` no quote), so it
    refuses valid strings there; llguidance admits them, escaped.
    """
    scan = _RegexScan(pattern)
    scan.parse()
    return scan.drops_specials


def pattern_problems(pattern: str, support: PatternSupport) -> list[str]:
    """Why an engine with ``support`` would not enforce ``pattern`` (empty: it would)."""
    found, inner_anchor = _scanned(pattern)
    supported = {
        "lookaround": support.lookaround,
        "unicode_whitespace": support.unicode_whitespace,
        "json_special": support.escapes_json_specials,
        "negated_escape": support.negated_classes_keep_out_escapes,
        "every_control": support.every_control_keeps_out_escapes,
        "depth": False,
    }
    problems = [message for kind, message in found if not supported[kind]]
    if not support.inner_anchors and inner_anchor:
        problems.append(
            "an anchor (^ or $) inside the pattern is treated as empty, so strings the "
            "pattern can never match are accepted"
        )
    return problems


# Routing asks once per engine about the same pattern, and scanning one of
# hundreds of kB is seconds of Python, so its findings (never its parse,
# which is tens of megabytes) are kept for the next question. A few entries:
# a key is the client's pattern, up to the 1 MiB an input may hold.
@functools.lru_cache(maxsize=8)
def _scanned(pattern: str) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The problems a scan of ``pattern`` found, by kind, and whether an anchor is inside it."""
    scan = _RegexScan(pattern)
    alternatives = scan.parse()
    return tuple(scan.problems.items()), _anchor_problems(alternatives, True, True)
