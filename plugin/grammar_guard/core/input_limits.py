"""Refuse input that could crash or stall native grammar code, before it gets there.

xgrammar is C++: a NUL byte, a pathological nesting depth or a multi-megabyte
document can crash the process or recurse without bound. These checks are
cheap, pure Python and run in the API process before anything is compiled.
"""

from __future__ import annotations

import re

from grammar_guard.core.errors import InvalidGrammarError

MAX_GRAMMAR_CHARS = 1 << 20
MAX_JSON_DEPTH = 64

# Control characters that are never meaningful in a grammar and that native
# parsers may treat as terminators. Tab, newline and carriage return are kept:
# grammars and regexes legitimately contain them.
_FORBIDDEN_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(r"[\[\]{}]")


def check_text(field: str, text: str) -> None:
    if len(text) > MAX_GRAMMAR_CHARS:
        raise InvalidGrammarError(
            f"{field} is {len(text)} characters long; the limit is {MAX_GRAMMAR_CHARS}"
        )
    found = _FORBIDDEN_CONTROL.search(text)
    if found:
        raise InvalidGrammarError(
            f"{field} contains the control character U+{ord(found.group()):04X} "
            f"at offset {found.start()}"
        )


def check_json_depth(field: str, text: str) -> None:
    """Reject JSON text nested deeper than :data:`MAX_JSON_DEPTH` before it is parsed.

    The parser itself recurses, so this has to run on the raw text.
    """
    if _text_depth(text) > MAX_JSON_DEPTH:
        raise _too_deep(field)


def check_json_value(field: str, document: object) -> None:
    """Check a parsed (or caller-built) JSON value: depth, object keys and every string in it.

    Walks without recursion, so a hostile nesting depth (or a cycle) ends in
    a refusal, not a ``RecursionError``. Strings are checked here because a
    control character written as a JSON escape only exists once decoded.
    """
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, str):
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


def _text_depth(text: str) -> int:
    depth = deepest = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest
