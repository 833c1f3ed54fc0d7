"""A client's JSON schema rewritten into an equivalent one the grammar engines enforce.

Some constructs mean something an engine can enforce, written in a way it
cannot: an ``allOf`` (xgrammar reads two branches as "any JSON value"), a
schema without ``type`` whose keywords constrain one type only, a ``format``
that an exact regex can stand for. :func:`rewrite_schema` writes each as the
equivalent schema the engines enforce, and both engines and the analysis of
what they leave unenforced read the rewritten schema:

- first, references that name a schema of the document by an embedded
  ``$id``, an ``$anchor`` or a ``$dynamicRef`` that one anchor settles,
  written as JSON pointers from the root
  (:mod:`~grammar_guard.core.schema.local_references`), so that the steps
  below may move the schemas such a document holds;
- ``allOf`` merged into its parent (:mod:`~grammar_guard.core.schema.all_of_merge`);
- a ``format`` with an exact pattern (:mod:`~grammar_guard.core.schema.formats`)
  written as that ``pattern``: both apply to strings only;
- the simplest ``not``\\ s written as what they leave: ``false`` for a ``not``
  of everything, the types or the finitely many values left, or the values
  of the schema's types outside some named ones
  (:mod:`~grammar_guard.core.schema.negation`);
- a ``oneOf`` whose branches no value satisfies two of, as ``anyOf``
  (:mod:`~grammar_guard.core.schema.exclusive_one_of`);
- an ``enum`` or ``const`` written as the named values that pass the rest of
  its schema, where each is decided
  (:mod:`~grammar_guard.core.schema.named_values`), after the simplest
  ``not``\\ s;
- ``uniqueItems`` over items of a few possible values, in arrays whose
  length is bounded, written as the ``enum`` of the arrays it allows
  (:mod:`~grammar_guard.core.schema.unique_items`), after the named values;
- ``propertyNames`` decided against each listed name: a name it refuses
  leaves ``properties``, and where no other name may be added it is dropped
  (:mod:`~grammar_guard.core.schema.property_names`);
- ``oneOf``, ``not`` and ``if``/``then``/``else`` whose negated parts are
  literals written out as an ``anyOf`` of branches
  (:mod:`~grammar_guard.core.schema.boolean_forms`), after the simplest
  ``not``\\ s;
- ``dependentRequired``, ``dependentSchemas`` and draft-07 ``dependencies``
  written as an ``anyOf`` with a branch per trigger name absent or present
  (:mod:`~grammar_guard.core.schema.dependencies`), after merging, with the
  rest of the schema merged into each branch;
- ``unevaluatedProperties`` and ``unevaluatedItems`` with no in-place
  applicator left as ``additionalProperties`` and ``items``
  (:mod:`~grammar_guard.core.schema.unevaluated`);
- an untyped schema split by type (:mod:`~grammar_guard.core.schema.untyped`),
  after merging, since merged branches often supply the type;
- ECMA-262's ``\\s`` and ``\\S`` in a ``pattern`` or a ``patternProperties`` name
  written as the classes they stand for, Unicode spaces included
  (:mod:`~grammar_guard.core.schema.ecma_whitespace`), and lookaheads at the
  start of one written out as the condition they are
  (:mod:`~grammar_guard.core.schema.pattern_lookaheads`);
- an ``if`` without ``then`` or ``else``, and those without an ``if``,
  dropped: they cannot fail, and would keep an ``allOf`` unmerged;
- a length or count written as a whole float (``"maxItems": 2.0``) written as
  the integer it is, which is all the engines take;
- a boolean ``propertyNames`` or ``prefixItems`` entry written as the
  keywords that say the same, and prefix items past ``maxItems`` dropped
  (:mod:`~grammar_guard.core.schema.boolean_subschemas`).

Every rewrite accepts exactly the values the schema accepts (draft 2020-12,
``format`` read as an assertion and ``dependencies`` as the draft-07
constraint, as the analysis reads them). Where that
cannot be shown, the construct stays as written and is refused or routed as
before. Moving a subschema is only safe where nothing refers into it, so a
schema that a ``$ref`` points inside of is never restructured, and a
document whose references are still not plain local JSON pointers after
the first step (another document's, or one the dynamic scope decides)
only gets its formats rewritten. A schema
with ``unevaluated*`` reads what its in-place applicators evaluated: only
its own ``allOf`` is merged into it (which keeps that), never it into
another schema; with no applicator left it is written as the adjacent
keywords (:mod:`~grammar_guard.core.schema.unevaluated`). In a document
holding one, no ``anyOf`` of branches is written: the branches leave out
keywords that constrain nothing, and may evaluate names it reads.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.input_limits import check_json_value
from grammar_guard.core.schema.all_of_merge import AllOfMerger, MergeTooCostly
from grammar_guard.core.schema.boolean_forms import combinators_as_any_of
from grammar_guard.core.schema.boolean_subschemas import booleans_written
from grammar_guard.core.schema.children import with_children
from grammar_guard.core.schema.contains_narrowing import narrowed_contains
from grammar_guard.core.schema.dependencies import dependencies_as_any_of
from grammar_guard.core.schema.ecma_whitespace import WHITESPACE_MEMBERS, whitespace_written_out
from grammar_guard.core.schema.evaluate import matching_work
from grammar_guard.core.schema.exclusive_one_of import (
    exclusive_one_of_as_any_of,
    narrowed_one_of_as_any_of,
)
from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.formats import DEFINED_FORMATS, format_max_length, format_pattern
from grammar_guard.core.schema.local_references import references_as_pointers
from grammar_guard.core.schema.named_values import named_values_decided
from grammar_guard.core.schema.negation import negation_rewritten
from grammar_guard.core.schema.open_objects import objects_opened
from grammar_guard.core.schema.pattern_lookaheads import lookaheads_written
from grammar_guard.core.schema.pointers import MISSING, join_pointer, resolve_pointer
from grammar_guard.core.schema.property_names import property_names_decided
from grammar_guard.core.schema.unevaluated import KEYWORDS as UNEVALUATED
from grammar_guard.core.schema.unevaluated import unevaluated_as_adjacent
from grammar_guard.core.schema.unique_items import unique_arrays_written
from grammar_guard.core.schema.untyped import split_by_type
from grammar_guard.core.schema.values import count_values
from grammar_guard.core.schema.vocabulary import ANNOTATIONS, subschemas

_RULES = (
    "references-as-pointers,boolean-subschemas,named-values-decided,patterns-matched,unique-items-listed,all-of-merged,untyped-split,format-as-pattern,whole-counts,unknown-formats-dropped,"
    "negation:5,dependencies-any-of:3,combinators-any-of:4,unevaluated-as-adjacent,"
    "ecma-whitespace-written,lookaheads-written,lone-conditions-dropped,exclusive-one-of-any-of:4,one-of-narrowed-by-optional-name:2,one-of-narrowed-by-required-names,contains-narrowed:4,property-names-decided,objects-opened-on-request"
)
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
# Keywords whose meaning depends on where a subschema sits, or on what its
# neighbours evaluated: a document with any of them is not restructured.
_PLACE_BOUND = frozenset(
    {
        "$anchor",
        "$dynamicAnchor",
        "$dynamicRef",
        "$recursiveAnchor",
        "$recursiveRef",
    }
)
# Where a schema keeps definitions: the merges keep a parent's in place, so
# a reference into them does not pin the parent.
_DEFINITIONS = ("$defs", "definitions")
# Bounds on the work and the growth one document may cause; past them the
# document is served as the client wrote it.
_MAX_MERGES = 4096
_MAX_NESTING = 64  # schemas being rewritten inside one another, references included
_GROWTH = 2
_GROWTH_SLACK = 1024  # JSON values
# Pattern matching for named values (evaluate.py), in automaton state visits
# for the whole document: a few tenths of a second at most.
_MATCH_WORK = 1_000_000
_REMEMBERED_TEXTS = 32


class _TooDeep(Exception):
    """The rewrite nests schemas inside one another past its bound."""


def rewrite_schema(document: Any, *, narrow: bool = False) -> Any:
    """``document``, a parsed JSON schema, with each construct rewritten that can be.

    With ``narrow``, a ``oneOf`` that no exact rewrite serves is narrowed to
    the objects that have a property telling its branches apart
    (:func:`~grammar_guard.core.schema.exclusive_one_of.narrowed_one_of_as_any_of`),
    and a ``contains`` to the arrays with a match among their first items
    (:mod:`~grammar_guard.core.schema.contains_narrowing`): routing asks for
    that only for a schema no engine serves as it is.
    Pure: ``document`` is never changed, and comes back itself when nothing
    was rewritten.
    """
    with matching_work(_MATCH_WORK):
        return _Rewrite(document, narrow=narrow).run()


@functools.lru_cache(maxsize=_REMEMBERED_TEXTS)
def rewritten_schema_text(text: str, open_objects: bool = False) -> str:
    """:func:`rewrite_schema` of the schema ``text`` as compact JSON; ``text`` if unchanged.

    With ``open_objects`` (a server's default), the objects and
    tuples the rewritten schema leaves open are said to be
    (:func:`~grammar_guard.core.schema.open_objects.objects_opened`), after
    every other step: those read the schema the client wrote.
    Remembered per text: routing checks a key on both engines, then one of
    them compiles it, and each reads the rewritten schema.
    """
    document = json.loads(text)
    rewritten = rewrite_schema(document)
    if open_objects:
        rewritten = objects_opened(rewritten)
    if rewritten is document:
        return text
    return json.dumps(rewritten, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=_REMEMBERED_TEXTS)
def narrowed_schema_text(text: str) -> str | None:
    """The schema ``text`` rewritten with ``narrow``, as compact JSON; None if no narrower."""
    narrowed = rewrite_schema(json.loads(text), narrow=True)
    written = json.dumps(narrowed, separators=(",", ":"), ensure_ascii=False)
    return None if written == rewritten_schema_text(text) else written


def _version() -> str:
    """The rules, and the format patterns and lengths they write, as one string for fingerprints."""
    digest = hashlib.sha256()
    for name in DEFINED_FORMATS:
        digest.update(f"{name}={format_pattern(name)},{format_max_length(name)}\n".encode())
    digest.update(WHITESPACE_MEMBERS.encode())
    return f"{_RULES}:{digest.hexdigest()[:16]}"


# Goes into each engine's fingerprint: a grammar stored before the rewrite
# changed was compiled from a different schema.
REWRITE_VERSION = _version()


class _Rewrite:
    """The rewrite of one document: two walks, with every subschema addressed by its pointer.

    The first walk merges ``allOf``\\ s and rewrites keyword values, bottom-up, and
    remembers each result by pointer, so that a reference merged into a
    branch gets its target's rewritten form. The second splits untyped
    schemas; it runs after all merging because a split schema (an
    ``anyOf``) no longer merges with another.
    """

    def __init__(self, client_document: Any, *, narrow: bool) -> None:
        # First, so that every later step reads references as root pointers.
        document = references_as_pointers(client_document)
        self.document = document
        self.narrow = narrow
        self.pinned = _pinned_pointers(document)
        # Where something reads what its neighbours evaluated, no anyOf is
        # written from branches: they drop keywords that constrain nothing
        # but evaluate names (``"properties": {"c": true}``).
        self.branches_allowed = not any(
            node.keys() & set(UNEVALUATED) for node, _ in _schemas(document)
        )
        self.merger = AllOfMerger(self.resolve, _MAX_MERGES)
        # Proofs that oneOf branches exclude one another, over the client's
        # references; with the schemas made for them, which it remembers by id.
        self.facts = SchemaFacts(document)
        self.made: list[Any] = []
        self.merged: dict[str, Any] = {}
        self.in_progress: set[str] = set()
        self.split: dict[tuple[int, bool, bool], Any] = {}

    def run(self) -> Any:
        try:
            merged = self.merge(self.document, "")
            result = self.split_types(merged, "", names=False)
        # RecursionError too: the nesting bound keeps the walks well inside
        # Python's stack, and a hostile document that still reached its end
        # is served as written rather than failing the request.
        except (MergeTooCostly, _TooDeep, RecursionError):
            return self.document
        if result is self.document or not _fits(result, self.document):
            return self.document
        return result

    def movable(self, pointer: str) -> bool:
        """Whether the schema at ``pointer`` may be restructured: nothing refers inside it."""
        return self.pinned is not None and pointer not in self.pinned

    # --- first walk: formats and allOf

    def merge(self, node: Any, pointer: str) -> Any:
        if not isinstance(node, dict):
            return node
        if pointer in self.merged:
            return self.merged[pointer]
        if len(self.in_progress) >= _MAX_NESTING:
            raise _TooDeep
        self.in_progress.add(pointer)
        try:
            children = with_children(
                node, pointer, lambda child, _, where: self.merge(child, where)
            )
            result = _patterns_written(
                booleans_written(
                    _counts_as_integers(_format_as_pattern(children)),
                    movable=self.movable(pointer),
                ),
                keys_movable=self.movable(pointer),
            )
            if self.branches_allowed and self.movable(pointer):
                result = _lone_conditions_dropped(result)
            if "allOf" in result and self.movable(pointer):
                merged = self.merger.merge(result)
                result = result if merged is None else merged
            if self.movable(pointer):
                # After the merge, which may bring a `not` or a dependency in;
                # negations first, so that each dependency branch gets the
                # node without its `not`.
                negated = negation_rewritten(result)
                result = result if negated is None else negated
                decided = named_values_decided(result) if isinstance(result, dict) else None
                result = result if decided is None else decided
                listed = unique_arrays_written(result) if isinstance(result, dict) else None
                result = result if listed is None else listed
                named = property_names_decided(result) if isinstance(result, dict) else None
                result = result if named is None else named
                if isinstance(result, dict) and self.branches_allowed:
                    result = self.combinators_written(result, node)
                if isinstance(result, dict) and self.branches_allowed:
                    result = self.dependencies_written(result, node, pointer)
                if isinstance(result, dict):
                    adjacent = unevaluated_as_adjacent(result)
                    result = result if adjacent is None else adjacent
            if isinstance(result, dict):
                result = self.boolean_target(result)
        finally:
            self.in_progress.discard(pointer)
        self.merged[pointer] = result
        return result

    def boolean_target(self, result: dict[str, Any]) -> Any:
        """``result`` itself, or the boolean a lone ``$ref`` of it resolves to.

        Neither engine takes a reference to ``false`` (llguidance:
        "Unsatisfiable schema"), which a definition rewritten (a ``not`` of
        everything) or written so may be; both take ``false`` in its place.
        """
        ref = result.get("$ref")
        if not isinstance(ref, str) or not result.keys() - {"$ref"} <= ANNOTATIONS:
            return result
        target = self.resolve(ref)
        return target if isinstance(target, bool) else result

    def combinators_written(self, result: dict[str, Any], node: dict[str, Any]) -> Any:
        """``result`` with an exclusive ``oneOf`` as ``anyOf``, and combinators of literals
        as branches; ``node`` is the schema as the client wrote it."""
        exclusive = exclusive_one_of_as_any_of(result, self.facts, self.made)
        result = result if exclusive is None else exclusive
        if self.narrow:
            # Before the combinators, which merge the node into the anyOf it writes.
            result = narrowed_contains(result) or result
        combined = combinators_as_any_of(result, node, self.merger.conjoin)
        if combined is not None:
            return combined
        narrowed = narrowed_one_of_as_any_of(result, self.facts, self.made) if self.narrow else None
        return result if narrowed is None else narrowed

    def dependencies_written(
        self, result: dict[str, Any], node: dict[str, Any], pointer: str
    ) -> dict[str, Any]:
        """``result`` with its dependency keywords written as branches, or those of its
        ``anyOf``'s branches (where the combinators merged them in)."""

        def written(schema: dict[str, Any]) -> dict[str, Any] | None:
            return dependencies_as_any_of(
                schema,
                node,
                self.merger.conjoin,
                lambda legacy, name: self.merge(
                    legacy, join_pointer(pointer, "dependencies", name)
                ),
            )

        whole = written(result)
        if whole is not None:
            # A dependency that always applies may bring in a oneOf whose
            # branches the node's required names tell apart.
            return self.combinators_written(whole, node)
        branches = result.get("anyOf")
        if not isinstance(branches, list):
            return result
        each = [written(branch) if isinstance(branch, dict) else None for branch in branches]
        if all(branch is None for branch in each):
            return result
        kept = [branch if new is None else new for branch, new in zip(branches, each, strict=True)]
        return {**result, "anyOf": kept}

    def resolve(self, ref: str) -> Any:
        """The first walk's result for a local reference's target; None if it cannot be had.

        A target being rewritten (a schema that refers to itself, or to a
        schema around it) cannot be merged into itself.
        """
        pointer = _local_pointer(ref)
        if pointer is None or pointer in self.in_progress:
            return None
        target = resolve_pointer(self.document, pointer)
        return None if target is MISSING else self.merge(target, pointer)

    # --- second walk: untyped schemas

    def split_types(
        self, node: Any, pointer: str | None, *, names: bool, branch: bool = False
    ) -> Any:
        """``node`` with its untyped schemas split by type.

        ``pointer`` is where the schema sits in the client's document, or
        None inside a restructured schema, which nothing refers into (a
        copy: the same object may sit elsewhere too, so these are
        remembered by identity). Not split: under ``propertyNames``
        (``names``), where every instance is a string anyway, and a branch
        of an ``allOf`` that could not be merged, which the engine that
        serves it merges itself, and more easily without an ``anyOf``.
        """
        if not isinstance(node, dict):
            return node
        key = (id(node), names, branch)
        if pointer is None and key in self.split:
            return self.split[key]
        movable = pointer is None or self.movable(pointer)

        def child(value: Any, keyword: str, child_pointer: str) -> Any:
            tracked = pointer is not None and (not movable or keyword in _DEFINITIONS)
            return self.split_types(
                value,
                child_pointer if tracked else None,
                names=names or keyword == "propertyNames",
                branch=keyword == "allOf",
            )

        result = with_children(node, pointer or "", child)
        if movable and not names and not branch:
            split = split_by_type(result)
            result = result if split is None else split
        if pointer is None:
            self.split[key] = result
        return result


def _format_as_pattern(node: dict[str, Any]) -> dict[str, Any]:
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


def _patterns_written(node: dict[str, Any], *, keys_movable: bool) -> dict[str, Any]:
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


def _counts_as_integers(node: dict[str, Any]) -> dict[str, Any]:
    """Counts written as whole floats (``2.0``), as the integers they are."""
    whole = {
        key: int(value)
        for key in _COUNTS & node.keys()
        if isinstance(value := node[key], float) and value.is_integer()
    }
    return {**node, **whole} if whole else node


def _lone_conditions_dropped(node: dict[str, Any]) -> dict[str, Any]:
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


def _local_pointer(ref: str) -> str | None:
    """The JSON pointer of a reference into this document, or None if it is not one.

    Also None for an array index written with a leading zero: it may name
    the same schema as a pointer spelled otherwise, which would hide that
    the reference points there.
    """
    if ref != "#" and not ref.startswith("#/"):
        return None
    pointer = unquote(ref[1:])
    if any(len(token) > 1 and token.startswith("0") for token in pointer.split("/")):
        return None
    return pointer


def _pinned_pointers(document: Any) -> frozenset[str] | None:
    """The schemas some ``$ref`` points inside of (not just at), which must keep their shape.

    A reference into a parent's definitions does not pin the parent: the
    rewrites keep definitions where they are. None: the document holds a
    reference that is not a local JSON pointer, an embedded ``$id``, or a
    keyword from :data:`_PLACE_BOUND`, and nothing in it may move.
    """
    pinned: set[str] = set()
    for node, pointer in _schemas(document):
        if _PLACE_BOUND & node.keys() or ("$id" in node and pointer):
            return None
        if "$ref" not in node:
            continue
        ref = node["$ref"]
        target = _local_pointer(ref) if isinstance(ref, str) else None
        if target is None:
            return None
        tokens = target.split("/")
        for depth in range(1, len(tokens)):
            if tokens[depth] not in _DEFINITIONS:
                pinned.add("/".join(tokens[:depth]))
    return frozenset(pinned)


def _schemas(document: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object in ``document`` reached through subschema keywords, with its pointer."""
    pending: list[tuple[Any, str]] = [(document, "")]
    while pending:
        node, pointer = pending.pop()
        if isinstance(node, dict):
            yield node, pointer
            pending.extend(subschemas(node, pointer))


def _fits(result: Any, document: Any) -> bool:
    """Whether ``result`` stays within the growth bound and the limits client input meets.

    Merged references are shared, not copied, so ``result`` may be a
    graph whose written-out size is far larger than its objects suggest:
    its values are counted as they will be written, stopping at the bound.
    """
    limit = _GROWTH * count_values(document, None) + _GROWTH_SLACK
    if count_values(result, limit) > limit:
        return False
    try:
        check_json_value("json_schema", result, controls_in_strings=True)
    except InvalidGrammarError:
        return False
    return True
