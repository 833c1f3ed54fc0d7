"""What llguidance is given for a request: the grammar text it compiles, and what it loosens.

``check`` and ``compile`` both go through :func:`validated`, so a grammar
the API process accepted is exactly the grammar the engine compiles. A JSON
schema is first written in the equivalent form both engines enforce
(:mod:`grammar_guard.core.schema.rewrite`: formats as exact patterns, for
one, where llguidance's own are loose), and what it still loosens is found
on that form. The rewrites of llguidance's own make a request mean the same
whichever engine serves it: objects and tuples closed where xgrammar closes
them (:mod:`grammar_guard.core.engines.llguidance.closed_objects`), regex digit and word classes
read as ASCII, ``patternProperties`` that only name listed properties folded
(:mod:`grammar_guard.core.engines.llguidance.listed_patterns`), property counts that say nothing
more of a closed object decided (:mod:`grammar_guard.core.engines.llguidance.object_counts`).
The JSON-Schema compiler is strict: a keyword it does not implement, or a
``format`` it does not know, is an error, never a silently dropped
constraint; only the warn policy makes it lenient.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import llguidance

from grammar_guard.core.engines.base import small_specs_remembered
from grammar_guard.core.engines.llguidance.closed_objects import closed_like_xgrammar
from grammar_guard.core.engines.llguidance.lark_alternations import widest_rule_alternation
from grammar_guard.core.engines.llguidance.listed_patterns import fold_listed_patterns
from grammar_guard.core.engines.llguidance.object_counts import decide_object_counts
from grammar_guard.core.engines.refusals import invalid_spec, invalid_spec_on_error
from grammar_guard.core.errors import (
    InvalidGrammarError,
    PastEngineLimitsError,
    UnenforcedKeywordError,
)
from grammar_guard.core.request.grammar_text import grammar_is_lark
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.capabilities import PatternSupport
from grammar_guard.core.schema.children import with_children
from grammar_guard.core.schema.findings import Finding
from grammar_guard.core.schema.pointers import join_pointer
from grammar_guard.core.schema.regex_scan import pattern_problems
from grammar_guard.core.schema.rewrite import rewritten_schema_text
from grammar_guard.core.schema.vocabulary import (
    subschemas,
)
from grammar_guard.core.settings import UnenforcedPolicy

# How llguidance's strict JSON compiler names what it would not enforce.
_UNIMPLEMENTED_KEYS = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
# A plain-name fragment, as drafts before 2019-09 wrote anchors in "id" or "$id".
_PLAIN_NAME = re.compile(r"#[A-Za-z_][-A-Za-z0-9._]*")
# The most items a row of llguidance's parser holds (lark_alternations.py).
_ROW_ITEMS = llguidance.LLParserLimits().max_items_in_row
# Goes into the fingerprint: a grammar stored before one of these rewrites
# existed (listed_patterns.py, required and branch names listed when closing,
# closed_objects.py, every $schema dropped, a choice as one terminal,
# object_counts.py) must not be loaded by an engine that applies it.
GRAMMAR_REWRITES = (
    "listed-pattern-properties-folded,required-names-listed,branch-names-listed,read-as-2020-12,"
    "choice-one-terminal,object-counts-decided"
)


class EngineDoesNotSupport(InvalidGrammarError):
    """This engine cannot take this kind of request at all (another engine may)."""


def check(
    spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
) -> tuple[Finding, ...]:
    """Parse ``spec`` without a tokenizer; raise :class:`InvalidGrammarError` if invalid.

    Routing's policy calls it (``LLGuidanceEngine.check`` is it).
    """
    return validated(spec, unenforced)[1]


@small_specs_remembered
def validated(spec: GrammarSpec, unenforced: UnenforcedPolicy) -> tuple[str, tuple[Finding, ...]]:
    """The grammar llguidance compiles for ``spec``, and what it leaves unenforced.

    A small spec is validated once for routing's check and the in-thread
    compile (:func:`~grammar_guard.core.engines.base.small_specs_remembered`).
    """
    inexact = _loosened_constraints(spec)
    if inexact and unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, inexact)
    grammar = _grammar(spec, lenient=False)
    if spec.kind is RequestKind.GRAMMAR:
        _require_rows_fit(grammar)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if not is_error:
        return grammar, inexact
    reason = messages[0] if messages else "invalid grammar"
    findings = _unenforced_findings(reason)
    if not findings:
        raise invalid_spec(spec, reason)
    if unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, findings)
    grammar = _grammar(spec, lenient=True)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise invalid_spec(spec, messages[0])
    return grammar, inexact + findings


def _require_rows_fit(lark: str) -> None:
    """Refuse a grammar whose widest alternation would fail at decoding, not after its compile."""
    widest = widest_rule_alternation(lark)
    if widest >= _ROW_ITEMS:
        raise PastEngineLimitsError(
            f"the grammar is past llguidance's limits: a rule has an alternation of {widest:,} "
            f"items, and its parser holds {_ROW_ITEMS - 1:,} at most; plain strings can be "
            "listed in a rule of their own (in Lark, an upper-case terminal)"
        )


def _loosened_constraints(spec: GrammarSpec) -> tuple[Finding, ...]:
    """The formats and patterns llguidance accepts but writes looser than JSON Schema means."""
    if spec.kind is not RequestKind.JSON_SCHEMA:
        return ()
    found: list[Finding] = []
    pending: list[tuple[Any, str]] = [
        (json.loads(rewritten_schema_text(spec.text, spec.options.open_objects)), "")
    ]
    while pending:
        node, pointer = pending.pop()
        if not isinstance(node, dict):
            continue
        found.extend(_loose_format(node, pointer))
        found.extend(_loose_patterns(node, pointer))
        pending.extend(subschemas(node, pointer))
    return tuple(found)


def _loose_format(node: dict[str, Any], pointer: str) -> Iterator[Finding]:
    value = node.get("format")
    if isinstance(value, str) and value in _INEXACT_FORMATS:
        reason = f"llguidance accepts some invalid values: {_INEXACT_FORMATS[value]}"
        yield Finding("format", join_pointer(pointer, "format"), value, reason)


def _loose_patterns(node: dict[str, Any], pointer: str) -> Iterator[Finding]:
    pattern = node.get("pattern")
    if isinstance(pattern, str) and (problems := pattern_problems(pattern, _PATTERNS)):
        yield Finding("pattern", join_pointer(pointer, "pattern"), None, "; ".join(problems))
    names = node.get("patternProperties")
    for name in names if isinstance(names, dict) else ():
        if problems := pattern_problems(name, _PATTERNS):
            where = join_pointer(pointer, "patternProperties", name)
            yield Finding("patternProperties", where, None, "; ".join(problems))


def _unenforced_findings(reason: str) -> tuple[Finding, ...]:
    # llguidance names the keywords but not where they are.
    keys = _UNIMPLEMENTED_KEYS.search(reason)
    if keys:
        names = json.loads(f"[{keys.group(1)}]")
        return tuple(
            Finding(str(name), "", reason="llguidance does not implement it") for name in names
        )
    unknown = _UNKNOWN_FORMAT.search(reason)
    if unknown:
        return (Finding("format", "", unknown.group(1), "llguidance does not know this format"),)
    return ()


def _grammar(spec: GrammarSpec, *, lenient: bool) -> str:
    with invalid_spec_on_error(spec):  # the converters raise ValueError and friends
        return _BUILDERS[spec.kind](spec, lenient)


def _json_schema(schema: str, spec: GrammarSpec, lenient: bool) -> str:
    closed = closed_like_xgrammar(read_as_2020_12(json.loads(schema)))
    fold_listed_patterns(closed)  # after closing: an allOf it adds would leave members open
    decide_object_counts(closed)  # after closing, which makes more objects closed
    options: dict[str, Any] = {
        "whitespace_flexible": spec.options.any_whitespace,
        "item_separator": ",",
        "key_separator": ":",
        "lenient": lenient,
    }
    return str(llguidance.LLMatcher.grammar_from_json_schema(json.dumps(closed), overrides=options))


def read_as_2020_12(schema: Any) -> Any:
    """``schema`` with no ``$schema`` anywhere, so that llguidance reads it as draft 2020-12.

    grammar-guard reads every schema as 2020-12, and its rewrites write
    2020-12 keywords. llguidance 1.7 reads a draft-04 ``$schema`` as draft-04
    and then ignores ``const``, ``propertyNames`` and ``dependentRequired``
    (``{"$schema": ".../draft-04/schema#", "const": 1}`` accepts ``2``), and
    ignores ``prefixItems`` under draft-07 and 2019-09. An earlier draft's
    plain-name identifier (``"id": "#point"``, ``"$id": "#point"``), which a
    ``"$ref": "#point"`` resolves to, is written as the ``$anchor`` 2020-12
    names it with.
    """
    if not isinstance(schema, dict):
        return schema
    node = with_children(schema, "", lambda child, _, __: read_as_2020_12(child))
    read = {key: value for key, value in node.items() if key != "$schema"}
    for keyword in ("id", "$id"):
        value = read.get(keyword)
        if "$anchor" not in read and isinstance(value, str) and _PLAIN_NAME.fullmatch(value):
            del read[keyword]
            read["$anchor"] = value[1:]
    return read


# Formats llguidance 1.7 accepts values of that the format forbids, found by
# the JSON-Schema-Test-Suite (benchmarks/coverage): refused like the keywords
# it does not implement, so that no constraint is silently loosened.
_INEXACT_FORMATS = {
    "date": "February 29 of years that are not leap years",
    "date-time": "leap seconds at any minute",
    "time": "leap seconds at any minute",
    "hostname": "names longer than 255 characters",
}
# What llguidance's ECMA-262 patterns get right: JSON escapes are written as
# escapes, and it refuses lookarounds and inner anchors itself; but its \s
# is Rust's, which leaves out U+FEFF, so \S lets the BOM through, and a
# negated class of characters (``[^\\]``, ``[^"a]``) lets the quote and the
# backslash it names through all the same (1.7.6; ``[^\W]`` is right), and so
# does a pattern matching all of U+0000-U+001F where it names neither of them
# (``[\u0000-\u001f]`` accepts ``"\""``; ``[\u0001-\u001f]`` does not).
_PATTERNS = PatternSupport(
    lookaround=True,
    inner_anchors=True,
    unicode_whitespace=False,
    escapes_json_specials=True,
    negated_classes_keep_out_escapes=False,
    every_control_keeps_out_escapes=False,
)


def _regex(regex: str) -> str:
    # ASCII \d and \w, as xgrammar reads them: a request means the same
    # whichever engine serves it.
    return str(
        llguidance.LLMatcher.grammar_from_lark(f"start: /{llguidance.regex_to_lark(regex, 'dw')}/")
    )


def _lark_or_gbnf(spec: GrammarSpec, lenient: bool) -> str:
    kind = "lark" if grammar_is_lark(spec.text) else "gbnf"
    return llguidance.grammar_from(kind, spec.text)


def _choice(spec: GrammarSpec) -> str:
    """The choice's strings as the alternatives of one lexer terminal.

    llguidance's own writing makes them the alternatives of a rule, which
    its parser checks in time that grows with the square of their number
    (twenty times the terminal's for a hundred thousand strings) and holds
    only 1,999 of in a row at decoding. As one terminal the strings are
    matched by the lexer alone; the two forms accept the same texts.
    """
    choices = json.loads(spec.text)
    alternatives = " | ".join(json.dumps(choice) for choice in choices)
    return llguidance.LLMatcher.grammar_from_lark(f"start: CHOICE\nCHOICE: {alternatives}")


def _not_supported(spec: GrammarSpec, lenient: bool) -> str:
    raise EngineDoesNotSupport(f"llguidance does not take {spec.kind.value} requests here")


_BUILDERS: dict[RequestKind, Callable[[GrammarSpec, bool], str]] = {
    RequestKind.JSON_SCHEMA: lambda spec, lenient: _json_schema(
        rewritten_schema_text(spec.text, spec.options.open_objects), spec, lenient
    ),
    RequestKind.JSON_OBJECT: lambda spec, lenient: _json_schema('{"type":"object"}', spec, lenient),
    RequestKind.REGEX: lambda spec, lenient: _regex(spec.text),
    RequestKind.CHOICE: lambda spec, lenient: _choice(spec),
    RequestKind.GRAMMAR: _lark_or_gbnf,
    # Structural tags stay with xgrammar, which implements vLLM's whole format.
    RequestKind.STRUCTURAL_TAG: _not_supported,
}
