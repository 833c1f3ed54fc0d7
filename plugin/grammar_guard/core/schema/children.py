"""A schema rebuilt with each of its direct subschemas rewritten, sharing what did not change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grammar_guard.core.schema.pointers import join_pointer
from grammar_guard.core.schema.vocabulary import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_VALUES

# Rewrites a subschema: (schema, the keyword holding it, its pointer) -> schema.
ChildRewrite = Callable[[Any, str, str], Any]


def with_children(node: dict[str, Any], pointer: str, rewrite: ChildRewrite) -> dict[str, Any]:
    """``node`` with ``rewrite(child, keyword, pointer)`` of each subschema; itself if unchanged."""
    changed: dict[str, Any] = {}
    for keyword, value in node.items():
        new = _rewritten_value(keyword, value, pointer, rewrite)
        if new is not value:
            changed[keyword] = new
    return {key: changed.get(key, value) for key, value in node.items()} if changed else node


def _rewritten_value(keyword: str, value: Any, pointer: str, rewrite: ChildRewrite) -> Any:
    def one(item: Any, *keys: str | int) -> Any:
        return rewrite(item, keyword, join_pointer(pointer, keyword, *keys))

    if keyword in SCHEMA_MAPS and isinstance(value, dict):
        items = {name: one(item, name) for name, item in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    if keyword in SCHEMA_LISTS and isinstance(value, list):
        entries = [one(item, index) for index, item in enumerate(value)]
        return entries if any(a is not b for a, b in zip(entries, value, strict=True)) else value
    if keyword in SCHEMA_VALUES:
        return rewrite(value, keyword, join_pointer(pointer, keyword))
    return value
