"""Refuse input that could crash or stall native grammar code, before it gets there.

xgrammar is C++: a NUL byte, a pathological nesting depth or a multi-megabyte
document can crash the process or recurse without bound. These checks are
cheap, pure Python and run in the API process before anything is compiled.
Each reads the text in one forward pass (no regular expression here can
backtrack), so a hostile text up to the size limit costs time linear in its
length, with the GIL held.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from grammar_guard.core.errors import InvalidGrammarError

MAX_GRAMMAR_CHARS = 1 << 20
MAX_JSON_DEPTH = 64

# Control characters that are never meaningful in a grammar and that native
# parsers may treat as terminators. Tab, newline and carriage return are kept:
# grammars and regexes legitimately contain them.
_FORBIDDEN_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The same in a JSON schema's text, but DEL: the parser refuses every other
# control character raw, and DEL can only stand in a string literal, where it
# means what its escape means, which a schema may hold (spec.py escapes it).
_FORBIDDEN_CONTROL_IN_JSON = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
# Where the scan of JSON text stops outside string literals: at a quote or a
# bracket, or once the rest is plain text, at a bracket. Each is one character
# class, so a search reads forward to the next such character and no further.
_QUOTE_OR_BRACKET = re.compile(r'["\[\]{}]')
_BRACKET = re.compile(r"[\[\]{}]")
# The rest of a string literal after its opening quote: runs of characters
# other than a quote or a backslash, or a backslash and the character it
# escapes, then the closing quote. Both quantifiers are possessive and the two
# branches start with different characters, so a match only reads forward: it
# never gives a character back to try another way.
_LITERAL_REST = re.compile(r'(?:[^"\\]++|\\.)*+"', re.DOTALL)
_OPENING = frozenset("[{")


def check_text(field: str, text: str, *, json_text: bool = False) -> None:
    if len(text) > MAX_GRAMMAR_CHARS:
        raise InvalidGrammarError(
            f"{field} is {len(text)} characters long; the limit is {MAX_GRAMMAR_CHARS}"
        )
    found = (_FORBIDDEN_CONTROL_IN_JSON if json_text else _FORBIDDEN_CONTROL).search(text)
    if found:
        raise InvalidGrammarError(
            f"{field} contains the control character U+{ord(found.group()):04X} "
            f"at offset {found.start()}"
        )


def check_json_depth(field: str, text: str) -> None:
    """Reject JSON text nested deeper than :data:`MAX_JSON_DEPTH` before it is parsed.

    The parser itself recurses, so this has to run on the raw text.
    """
    if scan_json_depth(text).deepest > MAX_JSON_DEPTH:
        raise _too_deep(field)


def check_json_value(field: str, document: object, *, controls_in_strings: bool = False) -> None:
    """Check a parsed (or caller-built) JSON value: depth, object keys and every string in it.

    Walks without recursion, so a hostile nesting depth (or a cycle) ends in
    a refusal, not a ``RecursionError``. Strings are checked here because a
    control character written as a JSON escape only exists once decoded.
    ``controls_in_strings`` lets them through, for a JSON schema: it reaches
    an engine only as JSON text, where they stay escaped. A NUL in a pattern
    reaches xgrammar's regex reader, which (0.2.8 on, as setup.cfg requires)
    refuses it rather than read a C string.
    """
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, str):
            if not controls_in_strings:
                check_text(field, node)
            continue
        if isinstance(node, dict):
            _check_keys(field, node)
            children: list[object] = [*node.keys(), *node.values()]
        elif isinstance(node, list | tuple):
            children = list(node)
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            raise _too_deep(field)
        pending.extend((child, depth + 1) for child in children)


def _check_keys(field: str, node: dict[object, object]) -> None:
    """JSON object keys are strings.

    ``json.dumps`` would write other keys as strings, so ``{1: a, "1": b}``
    becomes an object with the member "1" twice: the API process would
    validate that text while the engine, which serialises and parses the
    value again, compiles the object with the last member only.
    """
    for key in node:
        if not isinstance(key, str):
            raise InvalidGrammarError(
                f"{field} has an object key of type {type(key).__name__}; "
                "JSON object keys are strings"
            )


def _too_deep(field: str) -> InvalidGrammarError:
    return InvalidGrammarError(f"{field} is nested more than {MAX_JSON_DEPTH} levels deep")


class DepthScan(NamedTuple):
    """What :func:`scan_json_depth` found, and how much it read to find it."""

    deepest: int  # the deepest bracket nesting outside string literals
    steps: int  # characters read; one read by both passes counts twice


def scan_json_depth(text: str) -> DepthScan:
    """How deeply the brackets of JSON text nest, string literals left out, in linear time."""
    scanner = _DepthScanner(text)
    scanner.scan()
    return DepthScan(scanner.deepest, scanner.steps)


class _DepthScanner:
    """One forward pass over JSON text that counts every character it reads.

    A string literal is a quote, characters or backslash escapes, and a
    closing quote. A quote whose literal never closes is an ordinary
    character, and so is every quote after it: each of those is escaped inside
    the unclosed literal, and the literal it would open reads on exactly as
    that one does, to the end of the text. So at the first unclosed quote the
    rest of the text is plain, and a second pass counts its brackets: no
    character is read more than twice.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.steps = 0
        self.depth = self.deepest = 0

    def scan(self) -> None:
        position = 0
        while (stop := self._find(_QUOTE_OR_BRACKET, position)) is not None:
            if self.text[stop] != '"':
                self._bracket(stop)
                position = stop + 1
            elif (literal_end := self._literal_end(stop + 1)) is not None:
                position = literal_end
            else:
                self._count_brackets(stop + 1)
                return

    def _literal_end(self, start: int) -> int | None:
        """Where the literal whose body starts at ``start`` ends (past its quote), if it does."""
        rest = _LITERAL_REST.match(self.text, start)
        # A match read up to its end; one that failed read on to the end of
        # the text at most (to a last backslash with nothing to escape).
        self.steps += (len(self.text) if rest is None else rest.end()) - start
        return None if rest is None else rest.end()

    def _count_brackets(self, start: int) -> None:
        position = start
        while (stop := self._find(_BRACKET, position)) is not None:
            self._bracket(stop)
            position = stop + 1

    def _find(self, stops: re.Pattern[str], start: int) -> int | None:
        """The index of the first character in ``stops`` (a character class) from ``start`` on."""
        found = stops.search(self.text, start)
        self.steps += (len(self.text) if found is None else found.end()) - start
        return None if found is None else found.start()

    def _bracket(self, index: int) -> None:
        if self.text[index] in _OPENING:
            self.depth += 1
            self.deepest = max(self.deepest, self.depth)
        else:
            self.depth -= 1
