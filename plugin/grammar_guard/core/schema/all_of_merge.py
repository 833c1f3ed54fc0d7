"""``allOf`` written as the one schema it means, where that schema is exactly equivalent.

Draft 2020-12 evaluates every keyword of a schema on its own, except a few
that read each other (``properties`` with ``patternProperties`` and
``additionalProperties``, ``prefixItems`` with ``items``, ``contains`` with
its counts, ``if`` with ``then`` and ``else``). So ``{P..., "allOf": [A, B]}``
holds exactly when every keyword of P, A and B holds, and a keyword that only
one of them has can be copied as it is. A keyword several have must be
combined into one that holds exactly when each of theirs does: the tighter
bound, the common types, the union of ``required``... Where no such keyword
exists (two different ``pattern``\\ s, two ``anyOf``\\ s), the merge gives up
and the ``allOf`` stays as written: every merge here is an identity, never an
approximation.

Annotations (``title``, unknown keywords) constrain nothing; the first one
written is kept. A local ``$ref`` in a branch is replaced by its target, which
the caller resolves (and guards against cycles).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from grammar_guard.core.schema.all_of_combiners import (
    COMBINERS,
    Unmergeable,
    all_dicts,
    dict_or_fail,
    list_or_fail,
    union_keys,
)
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import json_equal
from grammar_guard.core.schema.vocabulary import ANNOTATIONS, KNOWN_KEYWORDS, STRUCTURAL

# The target of a local reference, already rewritten; None: it cannot be used here.
Resolver = Callable[[str], Any]

# Keywords that read what other keywords of the same schema evaluated.
_UNEVALUATED = frozenset({"unevaluatedProperties", "unevaluatedItems"})
# Keywords that read each other, merged as a unit.
_OBJECT_GROUP = ("properties", "patternProperties", "additionalProperties")
_ARRAY_GROUP = ("prefixItems", "items")
# Groups merged only when at most one part has them, or all have the same.
_OPAQUE_GROUPS = (("contains", "minContains", "maxContains"), ("if", "then", "else"))
_GROUP_OF = {
    keyword: group for group in (_OBJECT_GROUP, _ARRAY_GROUP, *_OPAQUE_GROUPS) for keyword in group
}


class MergeTooCostly(Exception):
    """The merges of one document took more steps than its budget allows."""


class AllOfMerger:
    """Merges the ``allOf``\\ s of one document; ``max_steps`` bounds the work on it."""

    def __init__(self, resolve: Resolver, max_steps: int) -> None:
        self._resolve = resolve
        self._steps_left = max_steps

    def merge(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """``node`` with its ``allOf`` merged into it, or None where that is not exact.

        An unsatisfiable conjunction (no common type, disjoint enums) is left
        to the engines, which say so in their own words.
        """
        branches = node["allOf"]
        if not isinstance(branches, list):
            return None
        parent = {key: value for key, value in node.items() if key != "allOf"}
        try:
            merged = self._merge([parent, *branches], parent_reads_annotations=True)
        except Unmergeable:
            return None
        if merged is True:
            return {}  # every part accepts anything, the parent too
        return merged if isinstance(merged, dict) else None

    def conjoin(self, schemas: Iterable[Any]) -> Any:
        """One schema holding exactly when each of ``schemas`` does (an ``allOf`` if need be)."""
        schemas = list(schemas)
        if not all(isinstance(schema, dict | bool) for schema in schemas):
            raise Unmergeable  # not schemas (draft-07's tuple "items", say): nothing to write
        if len(schemas) == 1:
            return schemas[0]
        try:
            return self._merge(schemas)
        except Unmergeable:
            return {"allOf": schemas}

    # --- the parts

    def _merge(self, schemas: list[Any], *, parent_reads_annotations: bool = False) -> Any:
        """``schemas`` as one; ``parent_reads_annotations``: the first is the parent of the rest.

        A schema with ``unevaluated*`` reads what its neighbours and in-place
        applicators evaluated, so only a parent may have it: merging its own
        branches into it keeps what they evaluated, while merging it with a
        sibling would let that evaluate names for it.
        """
        self._steps_left -= 1
        if self._steps_left < 0:
            raise MergeTooCostly
        parts = self._flattened(schemas, parent_reads_annotations)
        if parts is False:
            return False
        if not parts:
            return True
        if len(parts) == 1:
            return parts[0]
        merged: dict[str, Any] = {}
        done: set[str] = set()
        for key in _keys_in_order(parts):
            group = _GROUP_OF.get(key)
            if group is None:
                merged[key] = self._combined(key, [part[key] for part in parts if key in part])
            elif group[0] not in done:
                done.add(group[0])
                merged.update(self._group(group, parts))
        return merged

    def _flattened(
        self, schemas: list[Any], parent_reads_annotations: bool
    ) -> list[dict[str, Any]] | bool:
        """The parts to merge: ``true`` dropped, references replaced by their targets.

        False if a part is ``false``. Only the first part keeps its
        ``$defs`` and other structural keywords: the others are copies (a
        branch, a reference's target) whose definitions are reached where
        they are written, never through the merged schema.
        """
        parts: list[dict[str, Any]] = []
        for index, schema in enumerate(schemas):
            for depth, part in enumerate(self._dereferenced(schema)):
                if part is False:
                    return False
                if part is True:
                    continue
                if not isinstance(part, dict) or "allOf" in part:
                    raise Unmergeable  # not a schema, or an allOf that could not be merged
                parent = parent_reads_annotations and index == depth == 0
                if part.keys() & _UNEVALUATED and not parent:
                    raise Unmergeable
                if index or parts:
                    part = {k: v for k, v in part.items() if k not in STRUCTURAL}
                parts.append(part)
        return [part for part in parts if part]

    def _dereferenced(self, schema: Any) -> Iterator[Any]:
        """``schema`` without its ``$ref``, then the reference's target, and so on down a chain."""
        followed: set[str] = set()
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            if not isinstance(ref, str) or ref in followed:
                raise Unmergeable  # a cycle of references with nothing in between
            followed.add(ref)
            target = self._resolve(ref)
            if target is None:
                raise Unmergeable
            yield {key: value for key, value in schema.items() if key != "$ref"}
            schema = target
        yield schema

    # --- keywords that stand alone

    def _combined(self, key: str, values: list[Any]) -> Any:
        first = values[0]
        if len(values) == 1 or key in ANNOTATIONS or key in STRUCTURAL:
            return first
        if key not in KNOWN_KEYWORDS:
            return first  # an unknown keyword is an annotation in 2020-12
        if all(json_equal(first, other) for other in values[1:]):
            return first
        combine = COMBINERS.get(key)
        if combine is not None:
            return combine(values)
        if key in ("propertyNames", "dependentSchemas"):
            return self._conjoined_schemas(key, values)
        raise Unmergeable

    def _conjoined_schemas(self, key: str, values: list[Any]) -> Any:
        if key == "propertyNames":
            return self.conjoin(values)
        maps = all_dicts(values)
        return {name: self.conjoin(m[name] for m in maps if name in m) for name in union_keys(maps)}

    # --- keywords that read each other

    def _group(self, group: tuple[str, ...], parts: list[dict[str, Any]]) -> dict[str, Any]:
        sides = [part for part in parts if any(key in part for key in group)]
        if len(sides) == 1:
            return {key: sides[0][key] for key in sides[0] if key in group}
        if group is _OBJECT_GROUP:
            return self._object_group(sides)
        if group is _ARRAY_GROUP:
            return self._array_group(sides)
        sections = [{key: side[key] for key in group if key in side} for side in sides]
        if all(json_equal(sections[0], other) for other in sections[1:]):
            return sections[0]
        raise Unmergeable

    def _object_group(self, sides: list[dict[str, Any]]) -> dict[str, Any]:
        """``properties``, ``patternProperties`` and ``additionalProperties`` of several parts.

        Without a constraining ``additionalProperties`` each property and
        each pattern is checked on its own: the maps are united, an entry in
        several maps getting the conjunction of its schemas. A part whose
        ``additionalProperties`` constrains also constrains the properties
        only the other parts list: those get its schema too, and the
        properties no part lists get every such schema. With patterns too,
        which names a pattern matches decides what the additional schema
        covers: that is not merged.
        """
        properties = [dict_or_fail(side.get("properties", {})) for side in sides]
        patterns = [dict_or_fail(side.get("patternProperties", {})) for side in sides]
        closing = [
            side
            for side in sides
            if "additionalProperties" in side
            and can_fail("additionalProperties", side["additionalProperties"], side)
        ]
        if closing and any(patterns):
            raise Unmergeable
        merged: dict[str, Any] = {}
        if any("properties" in side for side in sides):
            merged["properties"] = {
                name: self.conjoin(_property_schemas(name, sides, properties, closing))
                for name in union_keys(properties)
            }
        if any("patternProperties" in side for side in sides):
            merged["patternProperties"] = {
                pattern: self.conjoin(m[pattern] for m in patterns if pattern in m)
                for pattern in union_keys(patterns)
            }
        if closing:
            additional = self.conjoin(side["additionalProperties"] for side in closing)
            merged["additionalProperties"] = additional
            if additional is False and "properties" in merged:
                # A property that may not appear at all needs no entry: as an
                # additional property it is refused just the same.
                merged["properties"] = {
                    name: schema
                    for name, schema in merged["properties"].items()
                    if schema is not False
                }
        else:
            # A vacuous additionalProperties (true) is kept: it tells engines
            # that close objects by default to leave this one open.
            opening = [side for side in sides if "additionalProperties" in side]
            if opening:
                merged["additionalProperties"] = opening[0]["additionalProperties"]
        return merged

    def _array_group(self, sides: list[dict[str, Any]]) -> dict[str, Any]:
        """``prefixItems`` and ``items`` of several parts: position by position.

        Past a part's own ``prefixItems`` its ``items`` applies (or nothing),
        so a position gets the conjunction of what each part says of it.
        """
        prefixes = [list_or_fail(side.get("prefixItems", [])) for side in sides]
        merged: dict[str, Any] = {}
        if any("prefixItems" in side for side in sides):
            merged["prefixItems"] = [
                self.conjoin(
                    prefix[index] if index < len(prefix) else side.get("items", True)
                    for side, prefix in zip(sides, prefixes, strict=True)
                )
                for index in range(max(map(len, prefixes)))
            ]
        items = [side["items"] for side in sides if "items" in side]
        if items:
            merged["items"] = self.conjoin(items)
        return merged


def _property_schemas(
    name: str,
    sides: list[dict[str, Any]],
    properties: list[dict[str, Any]],
    closing: list[dict[str, Any]],
) -> Iterator[Any]:
    """What each part says of property ``name``: its own schema, or its additional one."""
    for side, listed in zip(sides, properties, strict=True):
        if name in listed:
            yield listed[name]
        elif any(side is closed for closed in closing):
            yield side["additionalProperties"]


# --- helpers -----------------------------------------------------------------------------


def _keys_in_order(parts: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(key for part in parts for key in part))
