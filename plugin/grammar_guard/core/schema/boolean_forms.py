"""``oneOf``, ``not`` and ``if``/``then``/``else`` written as an ``anyOf`` of plain branches.

Neither engine enforces ``not`` or ``if``, and xgrammar reads a ``oneOf``
whose branches may overlap as an ``anyOf``. Each is a boolean combination of
schemas, and where every schema it negates is made of *literals*, keywords
whose failures one schema describes, the combination can be written out in
disjunctive normal form: an ``anyOf`` whose branches each conjoin the rest of
the node with some literals, some complements and some schemas taken as
they are. ``{"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}`` becomes::

    {"anyOf": [{"required": ["a"], "type": "object", "properties": {"b": false}},
               {"required": ["b"], "type": "object", "properties": {"a": false}}]}

The literals and the complement of each (the values it fails, exactly):

- ``type``: the other types, where type names can say them (not the numbers
  that are not integers);
- each name of ``required``: an object without it (``properties``: ``false``),
  and a name whose ``properties`` entry is ``false``: an object with it;
- a ``properties`` entry that only names values (``const``, ``enum``, as an
  ``if`` on a flag or a kind does): an object with that property holding
  another value. Merged with what the node says of the property, that
  ``not`` is written as the values left (``"type": "boolean"`` less
  ``true`` is ``false``, a string outside some named ones a ``pattern``);
  where it cannot be, the node stays as written. An entry of types alone:
  an object with that property of another type;
- a numeric bound: a number past it (``minimum`` 3 fails below 3, as
  ``exclusiveMaximum`` 3 says); a length or count bound: a string, array or
  object past it;
- a ``pattern`` of one repeated class (``^[A-Fa-f0-9]{24}$``): a string too
  short, too long or holding another character
  (:mod:`~grammar_guard.core.schema.class_run_complement`); any other
  pattern whose deterministic automaton is small: the strings it misses,
  written from that automaton
  (:mod:`~grammar_guard.core.schema.pattern_complement`).

A schema that is negated must consist of literals, ``not``, ``anyOf``,
``allOf``, ``oneOf`` and ``if`` of such schemas, and annotations; anything
else it holds has no complement written here, and the node stays as
written. A schema only used as it is (an ``anyOf`` branch, ``then``) may
hold anything. A branch that joins a literal with its complement, or whose
bounds leave no value of a type, loses those values rather than being
written for an engine to refuse. The branch count is bounded.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from grammar_guard.core.schema.boolean_literals import MAX_LITERALS, literals_of
from grammar_guard.core.schema.empty_types import without_empty_types
from grammar_guard.core.schema.property_negations import values_decided
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import count_values, type_names
from grammar_guard.core.schema.vocabulary import (
    ANNOTATIONS,
    KNOWN_KEYWORDS,
    STRUCTURAL,
    TYPE_KINDS,
)

# One schema holding exactly when each of several does (AllOfMerger.conjoin).
Conjoin = Callable[[Iterable[Any]], Any]

KEYWORDS = ("oneOf", "not", "if")
MAX_BRANCHES = 16
# Terms while reading: several often merge into one branch (an object lacking
# a name, and one whose properties forbid it), so more are read than written.
_MAX_TERMS = 64
# Keywords xgrammar reads alone: a node holding one is left as written.
_EXCLUSIVE = frozenset({"$ref", "$dynamicRef", "const", "enum", "allOf"})
# The combinators this module writes out, and the keywords read with them.
_COMBINATORS = ("oneOf", "anyOf", "not", "if", "then", "else")
# Keywords that read each other: where several stand together, each is kept
# as written (``properties`` that alone constrain nothing say which names
# ``additionalProperties`` leaves alone).
_READ_TOGETHER = (
    frozenset({"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}),
    frozenset({"prefixItems", "items", "unevaluatedItems"}),
    frozenset({"contains", "minContains", "maxContains"}),
)
# The written size the anyOf may reach, as dependencies.py bounds its own.
_GROWTH = 2
_GROWTH_SLACK = 256
_MAX_COUNTED = 1 << 16


class _Inexpressible(Exception):
    """A schema to negate holds something without a written complement, or too many branches."""


# A literal as one schema: (its identity, whether negated, the schema it stands for).
_Literal = tuple[str, bool, Any]
_Term = tuple[_Literal, ...]


def combinators_as_any_of(
    node: dict[str, Any], written: Any, conjoin: Conjoin
) -> dict[str, Any] | bool | None:
    """``node`` with ``oneOf``, ``not``, ``if`` and ``anyOf`` as one ``anyOf``; None if not exact.

    An ``anyOf`` alone is left as it is, and written out only with keywords
    that constrain beside it, which go into each of its branches.

    ``written`` is the node as the client wrote it: the result may be at
    most about twice its size. ``False`` when no value is left.
    """
    if node.keys() & _EXCLUSIVE:
        return None
    if "type" in node and type_names(node["type"]) is None:
        return None  # a malformed type, for the engine to report rather than a rewrite to hide
    formula = {key: node[key] for key in _COMBINATORS if key in node}
    beside = {k: v for k, v in node.items() if k not in _COMBINATORS and _neutral(k)}
    rest = {k: v for k, v in node.items() if k not in _COMBINATORS and not _neutral(k)}
    combines = {key for key, value in formula.items() if can_fail(key, value, node)}
    # An anyOf alone is what the engines read; beside keywords that constrain,
    # xgrammar would read it alone.
    constrained = any(can_fail(key, value, node) for key, value in rest.items())
    if not combines & set(KEYWORDS) and not ("anyOf" in combines and constrained):
        return None  # nothing to write (an if without then or else constrains nothing)
    try:
        terms = _terms(formula, True, [()])
    except _Inexpressible:
        return None
    rest_kinds = _kinds_of(rest) or _ALL_KINDS
    branches: dict[str, Any] = {}
    for term in terms:
        if not _term_kinds(term) & rest_kinds:
            continue  # no type in common with the rest of the node: no value
        joined = conjoin([rest, *(schema for _, _, schema in term)])
        for part in _spread(joined, conjoin):
            branch = values_decided(part)
            if branch is None:
                return None  # a property value's complement left as a `not`
            branch = without_empty_types(branch)
            if isinstance(branch, dict) and "allOf" in branch:
                return None  # the parts do not merge into one schema
            if branch is not False:
                branches.setdefault(json.dumps(branch, sort_keys=True), branch)
            if len(branches) > MAX_BRANCHES:
                return None  # stopped here: a term may spread into many branches
    if not branches:
        return None if beside.keys() & {"$defs", "definitions"} else False
    if len(branches) == 1:
        only = next(iter(branches.values()))
        result = {**beside, **only} if isinstance(only, dict) else beside
    else:
        result = {**beside, "anyOf": list(branches.values())}
    limit = _GROWTH * count_values(written, _MAX_COUNTED) + _GROWTH_SLACK
    return result if count_values(result, limit) <= limit else None


def _spread(branch: Any, conjoin: Conjoin) -> list[Any]:
    """``branch`` as one branch per part of its ``anyOf``, each joined with the rest of it.

    Such an ``anyOf`` is the complement of named values (:func:`values_outside`);
    beside other keywords xgrammar would read it alone.
    """
    if not isinstance(branch, dict) or not isinstance(branch.get("anyOf"), list):
        return [branch]
    rest = {key: value for key, value in branch.items() if key != "anyOf"}
    kinds = _kinds_of(rest) or _ALL_KINDS
    # A part of no type the rest admits holds no value (and would not merge).
    return [
        conjoin([rest, part]) for part in branch["anyOf"] if (_kinds_of(part) or _ALL_KINDS) & kinds
    ] or [False]


# --- disjunctive normal form
#
# Each function takes the terms found so far (``within``) and returns their
# conjunction with what it reads, so that a term holding a literal and its
# complement is dropped as soon as it appears, before it multiplies.


def _terms(schema: Any, positive: bool, within: list[_Term]) -> list[_Term]:
    """``within`` joined with ``schema`` (or its negation), as terms; [] for no value at all."""
    if schema is True or schema is False:
        return within if schema is positive else []
    if not isinstance(schema, dict):
        raise _Inexpressible
    parts = list(_parts(schema))
    if positive:
        for part in parts:
            within = _part_terms(part, True, within)
        return within
    return _or(_part_terms(part, False, within) for part in parts)


def _parts(schema: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The conjuncts of ``schema``: literals, combinators, and what is left as one schema."""
    opaque: dict[str, Any] = {}
    read_together = {
        key for group in _READ_TOGETHER if len(keys := group & schema.keys()) > 1 for key in keys
    }
    for key, value in schema.items():
        if key in read_together:
            opaque[key] = value  # what each means depends on the others: kept as one
            continue
        if _neutral(key) or not can_fail(key, value, schema):
            continue
        literals = literals_of(
            key, value, objects_only=type_names(schema.get("type")) == ("object",)
        )
        if literals is not None:
            for literal in literals:
                yield "literal", literal
        elif (key in ("oneOf", "anyOf", "allOf") and isinstance(value, list)) or key == "not":
            yield key, value
        elif key == "if":
            yield key, (value, schema.get("then", True), schema.get("else", True))
        elif key not in ("then", "else"):
            opaque[key] = value
    if opaque:
        yield "opaque", opaque


def _part_terms(part: tuple[str, Any], positive: bool, within: list[_Term]) -> list[_Term]:
    kind, value = part
    if kind == "literal":
        identity, negated, schema, complement = value
        if positive:
            return _joined(within, (identity, negated, schema))
        return [] if complement is False else _joined(within, (identity, not negated, complement))
    if kind == "opaque":
        if not positive:
            raise _Inexpressible
        return _joined(within, (json.dumps(value, sort_keys=True), False, value))
    if kind == "not":
        return _terms(value, not positive, within)
    if kind == "if":
        condition, then, otherwise = value
        return _or(
            [
                _terms(then, positive, _terms(condition, True, within)),
                _terms(otherwise, positive, _terms(condition, False, within)),
            ]
        )
    if kind == "oneOf":
        return _exactly_one(value, within) if positive else _not_exactly_one(value, within)
    if (kind == "anyOf") == positive:  # anyOf, or a negated allOf: any one holds
        return _or(_terms(branch, positive, within) for branch in value)
    for branch in value:
        within = _terms(branch, positive, within)
    return within


def _exactly_one(branches: list[Any], within: list[_Term]) -> list[_Term]:
    _check_count(branches)
    alternatives = []
    for chosen, branch in enumerate(branches):
        terms = _terms(branch, True, within)
        for index, other in enumerate(branches):
            if index != chosen:
                terms = _terms(other, False, terms)
        alternatives.append(terms)
    return _or(alternatives)


def _not_exactly_one(branches: list[Any], within: list[_Term]) -> list[_Term]:
    _check_count(branches)
    none = within
    for branch in branches:
        none = _terms(branch, False, none)
    pairs = [
        _terms(second, True, _terms(first, True, within))
        for first, second in itertools.combinations(branches, 2)
    ]
    return _or([none, *pairs])


def _check_count(branches: list[Any]) -> None:
    """A oneOf reads each branch once per other branch: past the bound, inexpressible."""
    if len(branches) > MAX_BRANCHES:
        raise _Inexpressible


def _or(alternatives: Iterable[list[_Term]]) -> list[_Term]:
    """The terms of all ``alternatives``, each once; past :data:`_MAX_TERMS`, inexpressible.

    ``alternatives`` is read lazily: a long ``anyOf`` stops being read at the bound.
    """
    terms: dict[frozenset[tuple[str, bool]], _Term] = {}
    for alternative in alternatives:
        for term in alternative:
            terms.setdefault(frozenset((i, n) for i, n, _ in term), term)
            if len(terms) > _MAX_TERMS:
                raise _Inexpressible
    # A term holding all of another's literals adds nothing to it (A or A and B is A).
    return [term for key, term in terms.items() if not any(other < key for other in terms)]


def _joined(within: list[_Term], literal: _Literal) -> list[_Term]:
    """Each term of ``within`` with ``literal``; those it leaves no value in dropped.

    A term holding the literal's complement admits nothing, and so does one
    whose typed literals share no type (an object lacking a name, and an
    array of at most one item).
    """
    identity, negated, schema = literal
    kinds = _kinds_of(schema)
    joined = []
    for term in within:
        if len(term) >= MAX_LITERALS:
            raise _Inexpressible  # each join reads the term: bounded, or quadratic in the request
        held = {(i, n) for i, n, _ in term}
        if (identity, not negated) in held:
            continue
        if (identity, negated) in held:
            joined.append(term)
        elif kinds is None or kinds & _term_kinds(term):
            joined.append((*term, literal))
    return joined


def _term_kinds(term: _Term) -> set[str]:
    """The kinds of value (``TYPE_KINDS``) every typed literal of ``term`` admits."""
    kinds = set(_ALL_KINDS)
    for _, _, schema in term:
        kinds &= _kinds_of(schema) or _ALL_KINDS
    return kinds


_ALL_KINDS = frozenset().union(*TYPE_KINDS.values())


def _kinds_of(schema: Any) -> set[str] | None:
    """The kinds of value (``TYPE_KINDS``) a literal's ``type`` admits; None: all of them."""
    names = type_names(schema.get("type")) if isinstance(schema, dict) else None
    return None if names is None else set().union(*(TYPE_KINDS[name] for name in names))


def _neutral(key: str) -> bool:
    """Whether ``key`` constrains no instance: an annotation, a structural or unknown keyword."""
    return key in ANNOTATIONS or key in STRUCTURAL or key not in KNOWN_KEYWORDS
