"""The rewrite of one document: two walks over its schemas, each addressed by its pointer.

:func:`~grammar_guard.core.schema.rewrite.rewrite_schema` runs a
:class:`Rewrite`: its first walk merges ``allOf``\\ s and applies, bottom-up,
the steps :mod:`~grammar_guard.core.schema.rewrite` lists; its second splits
untyped schemas. Kept apart from that module, which holds what the rest of
the plugin calls (the rewritten and the narrowed text, the version that
goes into fingerprints) and says what each step writes.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.limits import check_json_value
from grammar_guard.core.schema.all_of_merge import AllOfMerger, MergeTooCostly
from grammar_guard.core.schema.boolean_forms import combinators_as_any_of
from grammar_guard.core.schema.boolean_subschemas import booleans_written
from grammar_guard.core.schema.children import with_children
from grammar_guard.core.schema.contains_narrowing import narrowed_contains
from grammar_guard.core.schema.dependencies import dependencies_as_any_of
from grammar_guard.core.schema.exclusive_one_of import (
    exclusive_one_of_as_any_of,
    narrowed_one_of_as_any_of,
)
from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.keyword_rewrites import (
    counts_as_integers,
    format_as_pattern,
    lone_conditions_dropped,
    patterns_written,
)
from grammar_guard.core.schema.local_references import references_as_pointers
from grammar_guard.core.schema.named_values import named_values_decided
from grammar_guard.core.schema.negation import negation_rewritten
from grammar_guard.core.schema.pinned_schemas import (
    DEFINITIONS,
    local_pointer,
    pinned_pointers,
    schemas,
)
from grammar_guard.core.schema.pointers import MISSING, join_pointer, resolve_pointer
from grammar_guard.core.schema.property_names import property_names_decided
from grammar_guard.core.schema.unevaluated import KEYWORDS as UNEVALUATED
from grammar_guard.core.schema.unevaluated import unevaluated_as_adjacent
from grammar_guard.core.schema.unique_items import unique_arrays_written
from grammar_guard.core.schema.untyped import split_by_type
from grammar_guard.core.schema.values import count_values
from grammar_guard.core.schema.vocabulary import ANNOTATIONS

# Bounds on the work and the growth one document may cause; past them the
# document is served as the client wrote it.
_MAX_MERGES = 4096
_MAX_NESTING = 64  # schemas being rewritten inside one another, references included
_GROWTH = 2
_GROWTH_SLACK = 1024  # JSON values


class _TooDeep(Exception):
    """The rewrite nests schemas inside one another past its bound."""


class Rewrite:
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
        self.pinned = pinned_pointers(document)
        # Where something reads what its neighbours evaluated, no anyOf is
        # written from branches: they drop keywords that constrain nothing
        # but evaluate names (``"properties": {"c": true}``).
        self.branches_allowed = not any(
            node.keys() & set(UNEVALUATED) for node, _ in schemas(document)
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
            result = patterns_written(
                booleans_written(
                    counts_as_integers(format_as_pattern(children)),
                    movable=self.movable(pointer),
                ),
                keys_movable=self.movable(pointer),
            )
            if self.branches_allowed and self.movable(pointer):
                result = lone_conditions_dropped(result)
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
        pointer = local_pointer(ref)
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
            tracked = pointer is not None and (not movable or keyword in DEFINITIONS)
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
