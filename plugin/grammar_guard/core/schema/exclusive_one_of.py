"""A ``oneOf`` whose branches no value satisfies two of, written as the ``anyOf`` it then is.

``oneOf`` is "exactly one branch"; when no value is valid for two branches,
that is "at least one", an ``anyOf``, which both engines enforce and which
the rewrite can merge the node's other keywords into. The usual case is a
discriminator: each branch requires ``"kind"`` with values of its own.
Exclusivity is proved by :meth:`SchemaFacts.exclusive`, a sufficient test
(disjoint types, disjoint values, named values each invalid against the
other branch, patterns no string matches both of, disjoint bounds, a
required property whose schemas exclude each other, two levels down at
most), on each branch together with the node's own ``type``,
``required`` and ``properties``: a value those refuse fails the node
whatever its branches say, so only the values they accept need be in one
branch at most.

Two more cases are exact, each by adding to the node what the ``oneOf``
already implied:

- Branches that constrain one type only (objects: ``properties``,
  ``required``...; strings: ``pattern``...) all accept every value of
  another, so two of them do: no other value is valid, and the node gets
  that ``type``.
- Two closed objects (``additionalProperties: false``) whose shared names
  take disjoint values can share only the empty object; where both accept
  it, it is valid for two branches, and the node gets ``minProperties: 1``.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.values import is_number, type_set
from grammar_guard.core.schema.vocabulary import ANNOTATIONS, KEYWORD_TYPES, NUMERIC_TYPES

# Pairs of branches to test grow with the square of their number.
MAX_BRANCHES = 16
# Names two closed branches share that are compared, for each pair of branches.
MAX_SHARED_NAMES = 64
# The node's keywords that each branch is tested together with.
_CONTEXT = ("type", "required", "properties")
# What a closed-object branch may hold for its empty-object overlap to be read off.
_CLOSED_OBJECT_KEYWORDS = frozenset({"type", "properties", "additionalProperties", "required"})
_MAX_REF_HOPS = 8


def exclusive_one_of_as_any_of(
    node: dict[str, Any], facts: SchemaFacts, keep_alive: list[Any]
) -> dict[str, Any] | None:
    """``node`` with its ``oneOf`` as ``anyOf``, if its branches are exclusive; else None.

    ``keep_alive`` holds the schemas made for the test for as long as
    ``facts`` lives: it remembers schemas by ``id``.
    """
    return _as_any_of(node, facts, keep_alive)


def narrowed_one_of_as_any_of(
    node: dict[str, Any], facts: SchemaFacts, keep_alive: list[Any]
) -> dict[str, Any] | None:
    """``node`` narrowed to require a property that tells its branches apart, as ``anyOf``.

    For a ``oneOf`` no exact rewrite serves (:func:`_optional_discriminator`);
    None where there is no such property.
    """
    name = _optional_discriminator(node, facts)
    if name is not None:
        required = [*node.get("required", []), name]
        narrowed = _as_any_of({**node, "required": required}, facts, keep_alive)
        if narrowed is not None:
            return narrowed
    return _others_required_names_refused(node, facts, keep_alive)


def _optional_discriminator(node: dict[str, Any], facts: SchemaFacts) -> str | None:
    """A property every branch lists with values no other branch's allow, which none requires.

    Requiring it narrows the node: an object without it is refused, though
    it may be valid (the one over-constraint of the rewrite). In return the
    branches exclude each other, and the node is served, not refused: a
    ``"kind"`` each branch gives values of its own and leaves optional, or a
    ``"meta"`` object each branch requires a ``"system"`` of its own in.
    """
    branches, required = node.get("oneOf"), node.get("required", [])
    if not isinstance(branches, list) or not 1 < len(branches) <= MAX_BRANCHES:
        return None
    if not isinstance(required, list):
        return None
    listed = [facts.property_schemas(branch) for branch in branches]
    names = set.intersection(*(set(schemas) for schemas in listed)) - set(required)
    for name in sorted(names)[:MAX_SHARED_NAMES]:
        schemas = [each[name] for each in listed]
        if not all(facts.types(schema) for own in schemas for schema in own):
            continue  # a branch that forbids it would be dropped, not told apart
        if all(
            _told_apart(facts, schemas[index], schemas[other])
            for index in range(len(schemas))
            for other in range(index + 1, len(schemas))
        ):
            return name
    return None


def _others_required_names_refused(
    node: dict[str, Any], facts: SchemaFacts, keep_alive: list[Any]
) -> dict[str, Any] | None:
    """``node`` with each object branch refusing the names other branches require, as ``anyOf``.

    Open object branches told apart only by the names each requires
    (``{"required": ["radius"]}`` or ``{"required": ["length", "width"]}``)
    overlap: an object with ``radius``, ``length`` and ``width`` is valid for
    two, so the ``oneOf`` refuses it. Each branch then refuses every name a
    branch it is not otherwise told apart from requires and it does not: a
    value of that branch lacks a name the other requires, so it is valid for
    that branch alone. It narrows the node: an object with ``radius`` and
    ``length`` alone is refused, though valid. None where a branch requires
    every name another does, or is not an object schema written out.
    """
    branches = node.get("oneOf")
    if "anyOf" in node or not isinstance(branches, list) or not 1 < len(branches) <= MAX_BRANCHES:
        return None
    placed = _placed(branches, _context(node), keep_alive)
    refused: list[set[str]] = [set() for _ in branches]
    for index, left in enumerate(placed):
        for other, right in enumerate(placed):
            if other == index or facts.exclusive(left, right):
                continue
            if not facts.types(left) & facts.types(right) <= {"object"}:
                return None  # another kind of value may be valid for both
            only_other = facts.required_names(right) - facts.required_names(left)
            if not only_other:
                return None
            refused[index] |= only_other
    written = [_refusing(branch, names) for branch, names in zip(branches, refused, strict=True)]
    if any(branch is None for branch in written):
        return None
    result = {key: value for key, value in node.items() if key != "oneOf"}
    return {**result, "anyOf": written}


def _refusing(branch: Any, names: set[str]) -> Any:
    """``branch`` with ``names`` listed as ``false``; None where it is not written out."""
    if not names:
        return branch
    properties = branch.get("properties", {}) if isinstance(branch, dict) else None
    if not isinstance(properties, dict) or "$ref" in branch:
        return None
    return {**branch, "properties": {**properties, **dict.fromkeys(sorted(names), False)}}


def _told_apart(facts: SchemaFacts, left: tuple[Any, ...], right: tuple[Any, ...]) -> bool:
    return any(facts.exclusive(one, other) for one in left for other in right)


def _as_any_of(
    node: dict[str, Any], facts: SchemaFacts, keep_alive: list[Any]
) -> dict[str, Any] | None:
    """``node`` with its ``oneOf`` as ``anyOf``, if its branches are exclusive as written."""
    branches = node.get("oneOf")
    if "anyOf" in node or not isinstance(branches, list) or len(branches) > MAX_BRANCHES:
        return None
    node_type = node.get("type")
    kind = _only_kind_constrained(branches) if len(branches) > 1 else None
    if kind is not None:
        # Every value of another type passes each branch, so two: none is valid.
        node_type = _type_within(node_type, kind)
        if node_type is None:
            return None  # no value the node allows is left, or none a type names
    context = _context(node)
    if node_type is not None:
        context["type"] = node_type
    placed = _placed(branches, context, keep_alive)
    share_empty_object = False
    for index, left in enumerate(placed):
        for other in range(index + 1, len(placed)):
            if facts.exclusive(left, placed[other]):
                continue
            shared = _shared_object_at_most_empty(
                facts, (left, branches[index]), (placed[other], branches[other])
            )
            if shared is None:
                return None
            share_empty_object |= shared
    result = {("anyOf" if key == "oneOf" else key): value for key, value in node.items()}
    if node_type is not None:
        result["type"] = node_type
    if share_empty_object:
        least = node.get("minProperties", 0)
        if not is_number(least):
            return None  # left for the engine to report
        if least < 1:
            result["minProperties"] = 1
    return result


def _context(node: dict[str, Any]) -> dict[str, Any]:
    """The node's keywords that each branch is tested together with."""
    return {key: node[key] for key in _CONTEXT if key in node}


def _placed(branches: list[Any], context: dict[str, Any], keep_alive: list[Any]) -> list[Any]:
    """Each branch together with ``context``, kept alive for ``facts``, which remembers by id."""
    placed = [{"allOf": [branch, context]} if context else branch for branch in branches]
    keep_alive.extend(placed)
    return placed


def _only_kind_constrained(branches: list[Any]) -> frozenset[str] | None:
    """The one kind of value (``KEYWORD_TYPES``) all ``branches`` constrain; None: not one."""
    kinds = set()
    for branch in branches:
        if not isinstance(branch, dict):
            return None
        for key in branch:
            if key not in ANNOTATIONS:
                kinds.add(KEYWORD_TYPES.get(key))
    if len(kinds) != 1 or None in kinds:
        return None
    return kinds.pop()


def _type_within(node_type: Any, kind: frozenset[str]) -> str | None:
    """The node's ``type`` narrowed to ``kind``, as one type name; None where that is not one."""
    left = kind if node_type is None else type_set(node_type) & kind
    if left == NUMERIC_TYPES:
        return "number"
    return next(iter(left)) if len(left) == 1 else None


def _shared_object_at_most_empty(
    facts: SchemaFacts, left: tuple[Any, Any], right: tuple[Any, Any]
) -> bool | None:
    """Whether both branches accept the empty object, if it is all they can share; else None.

    Each side is (the branch in the node's context, the branch as written).
    """
    (left_placed, left_branch), (right_placed, right_branch) = left, right
    if not facts.types(left_placed) & facts.types(right_placed) <= {"object"}:
        return None
    left_closed, right_closed = (
        _closed_object(facts, left_branch),
        _closed_object(facts, right_branch),
    )
    if left_closed is None or right_closed is None:
        return None
    (left_properties, left_required), (right_properties, right_required) = (
        left_closed,
        right_closed,
    )
    shared = left_properties.keys() & right_properties.keys()
    if len(shared) > MAX_SHARED_NAMES:
        return None
    for name in shared:
        if not facts.exclusive(left_properties[name], right_properties[name]):
            return None
    # An object in both has only shared names, and no value for one passes both.
    return not left_required and not right_required


def _closed_object(facts: SchemaFacts, branch: Any) -> tuple[dict[str, Any], list[Any]] | None:
    """The properties and required names of a closed-object branch; None for any other."""
    for _ in range(_MAX_REF_HOPS):
        if not isinstance(branch, dict) or set(branch) != {"$ref"}:
            break
        branch = facts.target(branch)
    if not isinstance(branch, dict):
        return None
    if any(key not in ANNOTATIONS and key not in _CLOSED_OBJECT_KEYWORDS for key in branch):
        return None
    properties, required = branch.get("properties", {}), branch.get("required", [])
    if branch.get("additionalProperties") is not False or not isinstance(properties, dict):
        return None
    if not isinstance(required, list) or "object" not in type_set(branch.get("type", "object")):
        return None
    return properties, required
