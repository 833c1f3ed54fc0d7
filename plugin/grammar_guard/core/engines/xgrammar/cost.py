"""What serving a spec on xgrammar costs, read from the spec alone: compile time and refused values.

Routing sends a key to llguidance where xgrammar would compile it slowly
(:func:`slow_for_xgrammar`) or refuse some of its valid values
(:func:`xgrammar_over_constrains`), and upgrades a key back to xgrammar only
when :func:`xgrammar_compile_estimate_s` says the compile is affordable.
Needs no tokenizer and imports no engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from grammar_guard.core.request.repeat_count import repeat_count
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.regex_scan import drops_json_specials
from grammar_guard.core.schema.values import type_set
from grammar_guard.core.schema.vocabulary import subschemas

# xgrammar unrolls a bounded string into one rule per character and checks
# every token of the vocabulary against each, so its compile grows with every
# unit of maxLength and of a regex repetition count (not with maxItems);
# llguidance builds its lexer lazily and compiles any of these in about a
# millisecond. The thresholds and unit costs below are calibrated on the
# 129k-token vocabulary; docs/routing.md says how routing uses them.
SLOW_STRING_LENGTH = 8
SLOW_REPEAT_COUNT = 64
# Large grammars of any shape: xgrammar's compile grows faster than their
# size (tens of seconds at half a megabyte), llguidance's stays a fraction of
# a second.
SLOW_SPEC_CHARS = 64 * 1024
_STRING_BOUNDS = ("maxLength", "minLength")
# The per-unit compile times above, for the estimate.
_STRING_UNIT_S = 0.02
_REPEAT_UNIT_S = 0.0015
# A repetition of a class that admits most characters (``[^"]``, ``.``, ``\W``)
# costs about eight units of a narrow one (``[^a]{0,63}`` against
# ``[a-z]{0,63}``, on the 129k-token vocabulary). Counts add up: ``[^a]{0,31}[^b]{0,31}`` cost what
# ``[^a]{0,63}`` did, so a regex is slow by the sum of its repetitions.
_WIDE_ATOM_UNITS = 8
# How far back a repetition's class is looked for; a longer class counts as wide.
_CLASS_SCAN_CHARS = 256
_WIDE_SHORTHANDS = ("\\W", "\\S", "\\D")
# {n}, {n,} and {n,m} in a regex or a pattern.
_REGEX_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
# Keywords that say nothing about a value: a schema of only these admits any.
_ANNOTATIONS = frozenset(
    {"title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated"}
)
# Keywords that give an object's or an array's members their shape.
_OBJECT_SHAPE = frozenset(
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}
    | {"propertyNames", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"}
)
_ARRAY_SHAPE = frozenset(
    {"items", "prefixItems", "contains", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"}
)


def slow_for_xgrammar(spec: GrammarSpec) -> bool:
    """Whether ``spec`` is large, or bounds a string or a repetition: slow for xgrammar."""
    if len(spec.text) >= SLOW_SPEC_CHARS:
        return True
    if spec.kind is RequestKind.JSON_SCHEMA:
        return _schema_is_slow(json.loads(spec.text))
    if spec.kind in (RequestKind.REGEX, RequestKind.GRAMMAR):
        return _repeats_are_slow(spec.text)
    return False


def xgrammar_compile_estimate_s(spec: GrammarSpec) -> float:
    """Roughly how long xgrammar compiles ``spec`` on a large vocabulary, from its bounds."""
    if spec.kind is RequestKind.JSON_SCHEMA:
        strings, repeats = _schema_bounds(json.loads(spec.text))
    elif spec.kind in (RequestKind.REGEX, RequestKind.GRAMMAR):
        strings, repeats = 0, _repeat_units(spec.text)
    else:
        strings, repeats = 0, 0
    return strings * _STRING_UNIT_S + repeats * _REPEAT_UNIT_S


def _schema_bounds(node: Any) -> tuple[int, int]:
    """The sums of the string length bounds and of the pattern repeat counts in a schema."""
    strings = repeats = 0
    for keyword, value in _bounds_in(node):
        if keyword == "pattern":
            repeats += _repeat_units(value)
        else:
            strings += int(min(value, 1 << 31))
    return strings, repeats


def _repeat_units(text: str) -> int:
    """The repetition counts of a regex or pattern, each weighed by how wide its atom is."""
    return sum(
        repeat_count(m.group(2) or m.group(1)) * _atom_units(text, m.start())
        for m in _REGEX_REPEAT.finditer(text)
    )


def _atom_units(text: str, brace: int) -> int:
    """How many units one repetition of the atom before ``text[brace]`` costs.

    Reads back at most ``_CLASS_SCAN_CHARS``, so a whole spec costs time
    linear in its length; what it cannot tell counts as wide.
    """
    before = text[max(0, brace - _CLASS_SCAN_CHARS) : brace]
    if before.endswith(_WIDE_SHORTHANDS) or (before.endswith(".") and not before.endswith("\\.")):
        return _WIDE_ATOM_UNITS
    if before.endswith(")") and not before.endswith("\\)"):
        # A group is as wide as what it holds: (?:[^a]|a){0,23}, any
        # character, costs as a wide class; (ab){0,63} next to nothing.
        opening = _group_opening(before)
        return _WIDE_ATOM_UNITS if opening < 0 or _holds_wide(before[opening:]) else 1
    if not before.endswith("]"):
        return 1
    opening = before.rfind("[")
    if opening < 0:
        return _WIDE_ATOM_UNITS
    return _WIDE_ATOM_UNITS if before.startswith("[^", opening) else 1


def _group_opening(text: str) -> int:
    """Where the group closing at the end of ``text`` opens; -1 if not in ``text``."""
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        escaped = index > 0 and text[index - 1] == "\\"
        if text[index] == ")" and not escaped:
            depth += 1
        elif text[index] == "(" and not escaped:
            depth -= 1
            if depth == 0:
                return index
    return -1


def _holds_wide(group: str) -> bool:
    """Whether a group holds an atom that admits most characters."""
    dots = group.count(".") - group.count("\\.")
    return "[^" in group or dots > 0 or any(shorthand in group for shorthand in _WIDE_SHORTHANDS)


def _schema_is_slow(node: Any) -> bool:
    return any(
        _repeats_are_slow(value) if keyword == "pattern" else value >= SLOW_STRING_LENGTH
        for keyword, value in _bounds_in(node)
    )


def _bounds_in(node: Any) -> Iterator[tuple[str, Any]]:
    """Every string length bound (a number) and ``pattern`` (a string) in a schema."""
    pending = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if (key in _STRING_BOUNDS and isinstance(value, int | float)) or (
                    key == "pattern" and isinstance(value, str)
                ):
                    yield key, value
                elif key not in ("enum", "const", "default", "examples"):
                    pending.append(value)


def xgrammar_over_constrains(spec: GrammarSpec) -> bool:
    """Whether xgrammar, as grammar-guard runs it, refuses valid values of ``spec``.

    Measured on the coverage collections, where these decided every schema
    llguidance served better (no invalid value gets through either way):

    - xgrammar writes an arbitrary JSON value (a schema ``{}``, an object or
      array schema that leaves its members open) with ``", "`` between
      members even in compact mode, so compact output such as ``[1,2]`` is
      refused there;
    - an array schema with ``minItems`` or ``maxItems`` and no ``items``
      admits only ``[]``;
    - a ``pattern`` or ``patternProperties`` name must match the whole
      string, where JSON Schema looks for it anywhere in the string;
    - a character class of plain characters and ones JSON escapes (a
      control character, a quote, a backslash) admits only the plain ones:
      the JSON test suite's ``^\\s$``, written out, lost the tab and the
      line feed.
    """
    if spec.kind is not RequestKind.JSON_SCHEMA:
        return False
    compact = not spec.options.any_whitespace
    pending: list[Any] = [json.loads(spec.text)]
    while pending:
        node = pending.pop()
        if node is True and compact:
            return True
        if not isinstance(node, dict):
            continue
        if _open_container(node, compact) or _narrowed_patterns(node):
            return True
        pending.extend(schema for schema, _ in subschemas(node, ""))
    return False


def _open_container(node: dict[str, Any], compact: bool) -> bool:
    if not node.keys() - _ANNOTATIONS:
        return compact  # any value at all
    types = type_set(node.get("type"))
    if "array" in types and not _ARRAY_SHAPE & node.keys():
        return compact or "minItems" in node or "maxItems" in node
    return compact and "object" in types and not _OBJECT_SHAPE & node.keys()


def _narrowed_patterns(node: dict[str, Any]) -> bool:
    names = node.get("patternProperties")
    patterns = [node.get("pattern"), *(names if isinstance(names, dict) else ())]
    return any(
        isinstance(p, str) and (not _anchored(p) or drops_json_specials(p)) for p in patterns
    )


def _anchored(pattern: str) -> bool:
    """Whether ``pattern`` is anchored at both ends, so matching it whole is what it asks.

    Alternatives with anchors of their own (``^a|b$``) pass too: xgrammar
    serves those, as it did before this preference existed.
    """
    ends_with_anchor = pattern.endswith("$") and not pattern.endswith("\\$")
    return pattern.startswith("^") and ends_with_anchor


def _repeats_are_slow(text: str) -> bool:
    return _repeat_units(text) >= SLOW_REPEAT_COUNT
