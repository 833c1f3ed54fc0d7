"""The rewrites of one schema's own keywords that the rewrite's first walk applies.

A ``format`` with an exact pattern written as that ``pattern`` (one draft
2020-12 does not define dropped), leading lookaheads and ECMA-262's ``\\s``
in patterns written out, counts written as whole floats (``2.0``) as
integers, and an ``if`` without ``then`` or ``else`` (or those without an
``if``) dropped. Each reads one schema alone, never its neighbours or what
its references point at: kept apart from
:class:`~grammar_guard.core.schema.rewrite_walks.Rewrite`, which applies
them to every schema before its ``allOf`` is merged.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.ecma_whitespace import whitespace_written_out
from grammar_guard.core.schema.formats import DEFINED_FORMATS, format_max_length, format_pattern
from grammar_guard.core.schema.pattern_lookaheads import lookaheads_written

# Keywords whose value is a count: 2020-12 reads 2.0 there as 2.
_COUNTS = frozenset(
    {
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minContains",
        "maxContains",
    }
)


def format_as_pattern(node: dict[str, Any]) -> dict[str, Any]:
    """A ``format`` with an exact pattern, as that ``pattern``: both constrain strings only.

    Next to a ``pattern`` of its own the format stays: a string would have
    to match both, which one pattern cannot say without lookarounds. A
    format whose pattern leaves the length to ``maxLength`` (a host name's
    253 characters) gets that too, or keeps a smaller one; next to a
    ``maxLength`` that is no count the format stays. A format 2020-12 does
    not define is an annotation, which constrains nothing: it is dropped.
    """
    name = node.get("format")
    if not isinstance(name, str):
        return node
    if name not in DEFINED_FORMATS:
        return {key: value for key, value in node.items() if key != "format"}
    pattern = format_pattern(name)
    if pattern is None or "pattern" in node:
        return node
    longest = format_max_length(name)
    bound: dict[str, int] = {}
    if longest is not None:
        current = node.get("maxLength", longest)
        if isinstance(current, float) and current.is_integer():
            current = int(current)
        if isinstance(current, bool) or not isinstance(current, int) or current < 0:
            return node
        bound["maxLength"] = min(current, longest)
    rewritten = {
        ("pattern" if key == "format" else key): (pattern if key == "format" else value)
        for key, value in node.items()
    }
    return {**rewritten, **bound}


def patterns_written(node: dict[str, Any], *, keys_movable: bool) -> dict[str, Any]:
    """``pattern`` and ``patternProperties`` with leading lookaheads and ECMA-262's ``\\s``
    written out.

    A ``patternProperties`` key is a pattern too, and also a step of the
    pointers into it: renamed only where nothing refers inside the schema.
    """
    changed: dict[str, Any] = {}
    pattern = node.get("pattern")
    if isinstance(pattern, str) and (written := _pattern_written(pattern)) is not None:
        changed["pattern"] = written
    patterns = node.get("patternProperties")
    if keys_movable and isinstance(patterns, dict):
        renamed = {(_pattern_written(key) or key): value for key, value in patterns.items()}
        if len(renamed) == len(patterns) and renamed.keys() != patterns.keys():
            changed["patternProperties"] = renamed
    return {**node, **changed} if changed else node


def _pattern_written(pattern: str) -> str | None:
    # Lookaheads first: their pattern lists the classes \s stands for itself.
    return lookaheads_written(pattern) or whitespace_written_out(pattern)


def counts_as_integers(node: dict[str, Any]) -> dict[str, Any]:
    """Counts written as whole floats (``2.0``), as the integers they are."""
    whole = {
        key: int(value)
        for key in _COUNTS & node.keys()
        if isinstance(value := node[key], float) and value.is_integer()
    }
    return {**node, **whole} if whole else node


def lone_conditions_dropped(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` without an ``if`` that has no ``then`` or ``else``, or those without an ``if``.

    Neither can fail, but the ``allOf`` merge keeps the three together, so
    ``{"allOf": [{"if": A}, {"then": B}]}`` (two schemas that accept
    anything) was left unmerged. Only where nothing reads what an ``if``
    evaluated (``unevaluatedProperties``), which the caller checks.
    """
    if "if" in node:
        lone: tuple[str, ...] = () if node.keys() & {"then", "else"} else ("if",)
    else:
        lone = tuple(node.keys() & {"then", "else"})
    if not lone:
        return node
    return {key: value for key, value in node.items() if key not in lone}
