"""Whether one JSON value is valid against a schema, for the keywords that need no engine.

The rewrites decide schemas value by value where a schema names its values
(an ``enum`` beside a ``not``): each named value either passes the rest or
not, and what is left is an ``enum`` both engines enforce. This evaluator
answers for the assertions it can decide exactly and says None for the rest
(``format``, references, dynamic and unevaluated keywords, and patterns
outside the subset :mod:`pattern_match` reads), so that a caller never
rewrites on a guess. ``pattern`` and ``patternProperties`` names are
matched by :mod:`pattern_match`'s automaton, never by Python's ``re``; a
``pattern`` the rewrite wrote for the strings outside some named ones
(:mod:`string_complement`) is decided by those strings. Unknown keywords
constrain nothing, as everywhere in the analysis.

The work is bounded by a budget of subschema visits per call, a depth and a
budget of matching work, so a named value and a schema of any size cost at
most that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from grammar_guard.core.schema.pattern_match import match_work, pattern_matches
from grammar_guard.core.schema.string_complement import strings_outside
from grammar_guard.core.schema.values import json_type, satisfies, type_names
from grammar_guard.core.schema.vocabulary import (
    ANNOTATIONS,
    KEYWORD_TYPES,
    KNOWN_KEYWORDS,
    STRUCTURAL,
)

# Subschema visits one call may make before it gives up (answers None), and
# how deep it follows them (a client's schema nests 64 levels at most).
MAX_VISITS = 4096
MAX_DEPTH = 128
# Pattern matching one call may do, in automaton state visits (pattern_match.py),
# unless a caller bounds all of a document's at once (matching_work).
MAX_MATCH_WORK = 200_000
# The matching work left to the evaluations of the document being rewritten:
# one cell that every evaluation inside matching_work draws from.
_DOCUMENT_MATCH_WORK: ContextVar[list[int] | None] = ContextVar("match_work", default=None)
# Decided by values.satisfies alone.
_SIMPLE = frozenset(
    {
        "type", "const", "enum", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
        "multipleOf", "minLength", "maxLength", "minItems", "maxItems", "minProperties",
        "maxProperties", "required", "uniqueItems",
    }
)  # fmt: skip
# Read together with another keyword, by that keyword.
_READ_BY_OTHERS = frozenset({"then", "else", "minContains", "maxContains"})


@contextmanager
def matching_work(limit: int) -> Iterator[None]:
    """Bound the pattern matching of every evaluation inside to ``limit`` state visits in all."""
    token = _DOCUMENT_MATCH_WORK.set([limit])
    try:
        yield
    finally:
        _DOCUMENT_MATCH_WORK.reset(token)


class _Undecided(Exception):
    """A keyword this evaluator does not decide, or the budget spent."""


def validates(value: Any, schema: Any) -> bool | None:
    """Whether ``value`` is valid against ``schema``; None where that is not decided here."""
    try:
        return _Evaluation().valid(value, schema)
    except _Undecided:
        return None


def values_split(values: list[Any], schema: Any) -> tuple[list[Any], list[Any]] | None:
    """``values`` valid against ``schema`` and those not, each in order; None if one is undecided.

    Split by position, not by equality: ``true`` and ``1`` are different JSON values.
    """
    verdicts = [validates(value, schema) for value in values]
    if None in verdicts:
        return None
    return (
        [value for value, passes in zip(values, verdicts, strict=True) if passes],
        [value for value, passes in zip(values, verdicts, strict=True) if not passes],
    )


class _Evaluation:
    def __init__(self) -> None:
        self.visits = 0
        self.depth = 0
        self.match_work_left = _DOCUMENT_MATCH_WORK.get() or [MAX_MATCH_WORK]

    def valid(self, value: Any, schema: Any) -> bool:
        if schema is True or schema is False:
            return schema
        if not isinstance(schema, dict):
            raise _Undecided
        self.visits += 1
        if self.visits > MAX_VISITS or self.depth >= MAX_DEPTH:
            raise _Undecided
        self.depth += 1
        try:
            return self.all_keywords(value, schema)
        finally:
            self.depth -= 1

    def all_keywords(self, value: Any, schema: dict[str, Any]) -> bool:
        undecided = False
        for key, argument in schema.items():
            if key in ANNOTATIONS or key in STRUCTURAL or key in _READ_BY_OTHERS:
                continue
            if key not in KNOWN_KEYWORDS:
                continue  # an unknown keyword constrains nothing
            try:
                if not self.keyword(value, key, argument, schema):
                    return False  # one failing keyword decides, whatever the others
            except _Undecided:
                undecided = True
        if undecided:
            raise _Undecided
        return True

    def keyword(self, value: Any, key: str, argument: Any, schema: dict[str, Any]) -> bool:
        kind = json_type(value)
        applies_to = KEYWORD_TYPES.get(key)
        if applies_to is not None and not _of_kind(kind, applies_to):
            return True  # the keyword constrains values of other types only
        if key in _SIMPLE:
            verdict = satisfies(value, key, argument) if _well_formed(key, argument) else None
            if verdict is None:
                raise _Undecided  # a malformed value too: the engine reports it
            return verdict
        if key in ("allOf", "anyOf", "oneOf"):
            if not isinstance(argument, list) or not argument:
                raise _Undecided
            passed = self.count(value, argument)
            return (
                passed == len(argument)
                if key == "allOf"
                else (passed > 0 if key == "anyOf" else passed == 1)
            )
        if key == "not":
            return not self.valid(value, argument)
        if key == "if":
            branch = "then" if self.valid(value, argument) else "else"
            return self.valid(value, schema.get(branch, True))
        if kind == "object":
            return self.object_keyword(value, key, argument, schema)
        if kind == "array":
            return self.array_keyword(value, key, argument, schema)
        if key == "pattern" and isinstance(argument, str):
            named = strings_outside(argument)  # the rewrite's own, for strings outside some
            if named is not None:
                return value not in named
            return self.matches(argument, value)
        raise _Undecided  # format, references, dynamic and unevaluated keywords

    def matches(self, pattern: Any, text: str) -> bool:
        """Whether ``text`` matches ``pattern``, within the budget of matching work.

        Checked before the pattern's automaton is built too, so that building
        them (each at most pattern_match.MAX_STATES) stays within it.
        """
        if not isinstance(pattern, str) or self.match_work_left[0] <= 0:
            raise _Undecided
        work = match_work(pattern, text)
        if work is None or work > self.match_work_left[0]:
            self.match_work_left[0] -= 1  # the reading, at least
            raise _Undecided
        self.match_work_left[0] -= work
        verdict = pattern_matches(pattern, text)
        if verdict is None:
            raise _Undecided
        return verdict

    def count(self, value: Any, schemas: Iterable[Any]) -> int:
        return sum(1 for schema in schemas if self.valid(value, schema))

    def object_keyword(
        self, value: dict[str, Any], key: str, argument: Any, schema: dict[str, Any]
    ) -> bool:
        if key == "properties" and isinstance(argument, dict):
            return all(self.valid(value[n], s) for n, s in argument.items() if n in value)
        if key == "patternProperties" and isinstance(argument, dict):
            return all(
                self.valid(item, subschema)
                for name, item in value.items()
                for pattern, subschema in argument.items()
                if self.matches(pattern, name)
            )
        if key == "additionalProperties":
            listed = schema.get("properties", {})
            patterns = schema.get("patternProperties", {})
            if not isinstance(listed, dict) or not isinstance(patterns, dict):
                raise _Undecided
            return all(
                self.valid(item, argument)
                for name, item in value.items()
                if name not in listed and not any(self.matches(p, name) for p in patterns)
            )
        if key == "propertyNames":
            return all(self.valid(name, argument) for name in value)
        if key in ("dependentRequired", "dependentSchemas", "dependencies"):
            if not isinstance(argument, dict):
                raise _Undecided
            return all(
                self.dependency_met(value, need) for n, need in argument.items() if n in value
            )
        raise _Undecided  # unevaluatedProperties...

    def dependency_met(self, value: dict[str, Any], need: Any) -> bool:
        if isinstance(need, list):
            return all(name in value for name in need)
        return self.valid(value, need)

    def array_keyword(
        self, value: list[Any], key: str, argument: Any, schema: dict[str, Any]
    ) -> bool:
        if key == "prefixItems" and isinstance(argument, list):
            return all(self.valid(item, s) for item, s in zip(value, argument, strict=False))
        prefix = schema.get("prefixItems", [])
        if key == "items" and "additionalItems" not in schema and isinstance(prefix, list):
            return all(self.valid(item, argument) for item in value[len(prefix) :])
        if key == "contains":
            found = sum(1 for item in value if self.valid(item, argument))
            least, most = schema.get("minContains", 1), schema.get("maxContains")
            if not _count(least) or (most is not None and not _count(most)):
                raise _Undecided
            return found >= least and (most is None or found <= most)
        raise _Undecided  # additionalItems, unevaluatedItems...


def _of_kind(kind: str, applies_to: frozenset[str]) -> bool:
    """Whether a value of ``kind`` is among the types a keyword constrains."""
    return kind in applies_to or (kind == "integer" and "number" in applies_to)


def _count(bound: Any) -> bool:
    return isinstance(bound, int) and not isinstance(bound, bool) and bound >= 0


def _well_formed(key: str, argument: Any) -> bool:
    """Whether ``argument`` is what the draft defines for ``key`` (where satisfies assumes it)."""
    if key == "type":
        return type_names(argument) is not None
    if key in ("enum", "required"):
        return isinstance(argument, list)
    if key == "uniqueItems":
        return isinstance(argument, bool)
    return True
