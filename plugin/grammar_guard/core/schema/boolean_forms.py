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

from grammar_guard.core.schema.class_run_complement import run_complement
from grammar_guard.core.schema.dependencies import admits_no_object
from grammar_guard.core.schema.evaluate import values_split
from grammar_guard.core.schema.negation import (
    MAX_NAMED_VALUES,
    negation_rewritten,
    types_outside,
    values_outside,
)
from grammar_guard.core.schema.pattern_complement import automaton_complement
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import count_values, is_number, type_names
from grammar_guard.core.schema.vocabulary import (
    ALL_TYPES,
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
_MAX_LITERALS = 64  # in one term
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
# Bounds and the type each applies to: a lower one fails below, an upper one above.
_BOUNDS: dict[str, tuple[str, str]] = {
    # keyword: (the type it constrains, the keyword of its complement)
    "minimum": ("number", "exclusiveMaximum"),
    "exclusiveMinimum": ("number", "maximum"),
    "maximum": ("number", "exclusiveMinimum"),
    "exclusiveMaximum": ("number", "minimum"),
}
_COUNTS: dict[str, tuple[str, str, int]] = {
    # keyword: (the type it constrains, the keyword of its complement, the shift)
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
    "minProperties": ("object", "maxProperties", -1),
    "maxProperties": ("object", "minProperties", 1),
}
# Lower and upper bounds of each type, for branches they leave empty.
_RANGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "number": (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")),
    "string": (("minLength",), ("maxLength",)),
    "array": (("minItems",), ("maxItems",)),
    "object": (("minProperties",), ("maxProperties",)),
}
# The keywords of each type a branch without values of that type no longer needs.
_KEYWORDS_OF = {
    key: kind
    for kind, keys in (
        ("number", ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf")),
        ("string", ("minLength", "maxLength", "pattern", "format")),
        ("array", ("minItems", "maxItems", "items", "prefixItems", "contains", "uniqueItems")),
        ("object", ("minProperties", "maxProperties", "required", "properties",
                    "additionalProperties", "patternProperties", "propertyNames")),
    )
    for key in keys
}  # fmt: skip
# The written size the anyOf may reach, as dependencies.py bounds its own.
_GROWTH = 2
_GROWTH_SLACK = 256
_MAX_COUNTED = 1 << 16


class _Inexpressible(Exception):
    """A schema to negate holds something without a written complement, or too many branches."""


# A literal as one schema: (its identity, whether negated, the schema it stands for).
_Literal = tuple[str, bool, Any]
# A literal as a keyword reads: (identity, whether negated, its schema, its complement).
_Definition = tuple[str, bool, Any, Any]
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
            branch = _values_decided(part)
            if branch is None:
                return None  # a property value's complement left as a `not`
            branch = _without_empty_types(branch)
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
        literals = _literals(key, value, objects_only=type_names(schema.get("type")) == ("object",))
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
        if len(term) >= _MAX_LITERALS:
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


# --- literals and their complements


def _literals(key: str, value: Any, *, objects_only: bool) -> list[_Definition] | None:
    """``key: value`` as literals; None: it is not one.

    ``objects_only``: the schema holding it is of type ``object``, where a
    property forbidden is exactly the complement of the name required, and
    is written as that, so that the two are seen to exclude each other.
    """
    if key == "type":
        outside = types_outside(value)
        if outside is None:
            return None
        complement = {"type": list(outside)} if outside else False
        return [(_identity(key, value), False, {key: value}, complement)]
    names = value if key in ("required", "properties") and isinstance(value, list | dict) else ()
    if len(names) > _MAX_LITERALS:
        return None  # one literal a name: past the bound, the keyword is kept whole
    if key == "required" and isinstance(value, list) and all(isinstance(n, str) for n in value):
        return [
            (_required(name), False, {key: [name]}, _object({"properties": {name: False}}))
            for name in dict.fromkeys(value)
        ]
    if key == "properties" and isinstance(value, dict) and value:
        outside = {name: _entry_complement(entry) for name, entry in value.items()}
        if all(complement is not None for complement in outside.values()):
            return [
                (
                    _identity(key, {name: entry}),
                    False,
                    {key: {name: entry}},
                    _object({"required": [name], "properties": {name: outside[name]}}),
                )
                for name, entry in value.items()
            ]
        if not all(entry is False for entry in value.values()):
            return None
        if objects_only:
            return [
                (_required(name), True, _object({key: {name: False}}), {"required": [name]})
                for name in value
            ]
        return [
            (
                f"absent={json.dumps(name)}",
                False,
                {key: {name: False}},
                _object({"required": [name]}),
            )
            for name in value
        ]
    if key in ("const", "enum"):
        named = [value] if key == "const" else value
        outside = values_outside(named, ALL_TYPES) if isinstance(named, list) and named else None
        return None if outside is None else [(_identity(key, value), False, {key: value}, outside)]
    if key == "pattern" and isinstance(value, str):
        outside = run_complement(value) or automaton_complement(value)
        if outside is None:
            return None
        return [(_identity(key, value), False, {key: value}, {"type": "string", key: outside})]
    if key in _BOUNDS and is_number(value):
        kind, opposite = _BOUNDS[key]
        return [(_identity(key, value), False, {key: value}, {"type": kind, opposite: value})]
    if key in _COUNTS and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        kind, opposite, shift = _COUNTS[key]
        bound = value + shift
        complement = {"type": kind, opposite: bound} if bound >= 0 else False
        return [(_identity(key, value), False, {key: value}, complement)]
    return None


def _entry_complement(entry: Any) -> Any:
    """What a property's value is when it fails a ``properties`` entry; None: not said here.

    For an entry of named values (``const``, ``enum``), their ``not``, which
    :func:`_values_decided` writes out once merged with the node's own entry;
    for an entry of types alone, the other types.
    """
    if not isinstance(entry, dict) or not all(
        key in ("const", "enum", "type") or key in ANNOTATIONS for key in entry
    ):
        return None
    if entry.keys() & {"const", "enum"}:
        return {"not": entry}
    if "type" not in entry:
        return None
    others = types_outside(entry["type"])
    if not others:
        return None  # a malformed type, or one that every value has
    return {"type": list(others) if len(others) > 1 else others[0]}


def _values_decided(branch: Any) -> Any:
    """``branch`` with the ``not`` of each property value written as the values it leaves.

    A complement of named values (``"not": {"const": true}``) becomes, merged
    with what the node says of the property (``"type": "boolean"``), the
    values left. None where a ``not`` cannot be written so (a string not
    among some): the node stays as written.
    """
    properties = branch.get("properties") if isinstance(branch, dict) else None
    if not isinstance(properties, dict):
        return branch
    decided = {}
    for name, entry in properties.items():
        if isinstance(entry, dict) and entry.keys() & {"not", "allOf"}:
            entry = _entry_decided(entry)
            if entry is None:
                return None
        decided[name] = entry
    return {**branch, "properties": decided} if decided != properties else branch


def _entry_decided(entry: dict[str, Any]) -> Any:
    """A merged property entry with its ``not``\\ s written out; None where one stays.

    Several complements of one property merge into an ``allOf`` of ``not``\\ s
    beside the values the node names: those values are then decided one by
    one against the whole entry (:func:`evaluate.validates`), and the entry
    is the ``enum`` of those that pass.
    """
    named = _named_values(entry)
    if named is not None:
        split = values_split(named, entry)
        if split is None:
            return None
        left, _ = split
        return {"enum": left} if left else False
    if "not" not in entry:
        return entry  # an allOf of the client's own, left as it was
    written = negation_rewritten(entry)
    return None if written is None or (isinstance(written, dict) and "not" in written) else written


def _named_values(entry: dict[str, Any]) -> list[Any] | None:
    """The values an entry names (its ``const`` or ``enum``, or an ``allOf`` part's), if few."""
    for part in [entry, *(entry.get("allOf") or [])]:
        if not isinstance(part, dict):
            continue
        named = [part["const"]] if "const" in part else part.get("enum")
        if isinstance(named, list) and len(named) <= MAX_NAMED_VALUES:
            return named
    return None


def _identity(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value, sort_keys=True)}"


def _required(name: str) -> str:
    return f"required={json.dumps(name)}"


def _object(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", **schema}


# --- branches no value of a type passes


def _without_empty_types(branch: Any) -> Any:
    """``branch`` without the types it admits no value of (``false`` if none is left).

    Such a branch (``minimum`` 3 and ``exclusiveMaximum`` 3, a name both
    required and forbidden: a literal joined with a neighbour's complement)
    is exact, but an engine refuses a schema that holds it: the values of
    that type are dropped instead.
    """
    if not isinstance(branch, dict):
        return branch
    empty = [kind for kind in _RANGES if _range_empty(branch, kind)]
    if "object" not in empty and (admits_no_object(branch) or _too_many_required(branch)):
        empty.append("object")
    if not empty:
        return branch
    declared = branch.get("type", list(ALL_TYPES))
    names = [declared] if isinstance(declared, str) else declared
    if not isinstance(names, list):
        return branch  # a malformed type, for the engine to report
    dropped = {*empty, *(("integer",) if "number" in empty else ())}
    left = [name for name in names if name not in dropped]
    if not left:
        return False
    kept = {
        key: value
        for key, value in branch.items()
        if key not in _KEYWORDS_OF or _KEYWORDS_OF[key] not in empty
    }
    return {**kept, "type": left if len(left) > 1 else left[0]}


def _too_many_required(branch: dict[str, Any]) -> bool:
    """Whether ``branch`` requires more names than its ``maxProperties`` lets an object have."""
    required, most = branch.get("required"), branch.get("maxProperties")
    if not isinstance(required, list) or not isinstance(most, int) or isinstance(most, bool):
        return False
    return len({name for name in required if isinstance(name, str)}) > most


def _range_empty(branch: dict[str, Any], kind: str) -> bool:
    lows, highs = _RANGES[kind]
    for low_key, high_key in itertools.product(lows, highs):
        low, high = branch.get(low_key), branch.get(high_key)
        if not (is_number(low) and is_number(high)):
            continue
        exclusive = low_key.startswith("exclusive") or high_key.startswith("exclusive")
        if low > high or (low == high and exclusive):
            return True
    return False


def _neutral(key: str) -> bool:
    """Whether ``key`` constrains no instance: an annotation, a structural or unknown keyword."""
    return key in ANNOTATIONS or key in STRUCTURAL or key not in KNOWN_KEYWORDS
