"""Which order a schema suggests for an instance's object keys, and each value's subschema.

A best effort for the writer, never a validator: local ``$ref`` is followed, ``allOf`` members add
their properties, of ``anyOf``/``oneOf`` the branch declaring most of the instance's keys is used;
keys the schema does not name follow in the instance's order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import unquote

from grammar_guard.core.schema.pointers import MISSING, resolve_pointer

# Nodes visited per lookup at most: schemas can be large and self-referencing.
_MAX_NODES = 256
_ALTERNATIVES = ("anyOf", "oneOf")


class SchemaNavigator:
    def __init__(self, root: Any) -> None:
        self._root = root

    def key_order(self, schema: Any, keys: Sequence[str]) -> list[str]:
        """``keys`` reordered: the schema's properties first, then the rest as given."""
        present = set(keys)
        ordered: list[str] = []
        for node in self._members(schema, present):
            for name in _dict(node.get("properties")):
                if name in present and name not in ordered:
                    ordered.append(name)
        return ordered + [key for key in keys if key not in ordered]

    def property_schema(self, schema: Any, key: str, keys: Sequence[str]) -> Any:
        """The subschema for member ``key`` of an object with ``keys``; None if unknown."""
        members = list(self._members(schema, set(keys)))
        for node in members:
            properties = _dict(node.get("properties"))
            if key in properties:
                return properties[key]
        for node in members:
            for pattern, subschema in _dict(node.get("patternProperties")).items():
                if _matches(pattern, key):
                    return subschema
        for node in members:
            additional = node.get("additionalProperties")
            if isinstance(additional, dict):
                return additional
        return None

    def item_schema(self, schema: Any, index: int) -> Any:
        """The subschema for array element ``index``; None if unknown."""
        for node in self._members(schema, set()):
            prefix = node.get("prefixItems")
            items = node.get("items")
            if isinstance(items, list):  # drafts before 2020-12 wrote tuples this way
                prefix, items = items, node.get("additionalItems")
            if isinstance(prefix, list) and index < len(prefix):
                return prefix[index]
            if isinstance(items, dict):
                return items
        return None

    def _members(self, schema: Any, keys: set[str]) -> Iterator[dict[str, Any]]:
        """The node and every node it is combined with, resolved, in declaration order."""
        seen: set[int] = set()
        pending = [schema]
        while pending and len(seen) < _MAX_NODES:
            for node in self._direct(pending.pop(0), seen):
                yield node
                alternatives = [
                    branch for name in _ALTERNATIVES for branch in _list(node.get(name))
                ]
                if alternatives:
                    pending.append(max(alternatives, key=lambda b: self._declared(b, keys)))

    def _direct(self, schema: Any, seen: set[int]) -> Iterator[dict[str, Any]]:
        """The node, its ``$ref`` target and ``allOf`` members, each once."""
        node = _dict(schema)
        if not node or id(node) in seen:
            return
        seen.add(id(node))
        yield node
        yield from self._direct(self._resolve(node.get("$ref")), seen)
        for member in _list(node.get("allOf")):
            yield from self._direct(member, seen)

    def _declared(self, branch: Any, keys: set[str]) -> int:
        names: set[str] = set()
        for node in self._direct(branch, set()):
            names.update(_dict(node.get("properties")))
        return len(names & keys)

    def _resolve(self, reference: Any) -> Any:
        if not isinstance(reference, str) or not reference.startswith("#"):
            return None
        # An anchor, or a pointer to nothing, resolves to MISSING.
        node = resolve_pointer(self._root, unquote(reference[1:]))
        return None if node is MISSING else node


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:  # ECMAScript syntax Python does not read
        return False
