"""Objects and tuples a schema leaves open, said to be open outright.

JSON Schema lets an object hold properties its schema does not list, unless
``additionalProperties`` (or ``unevaluatedProperties``) says otherwise, and
a tuple hold items past its ``prefixItems`` unless ``items`` does. Both
engines would close them (xgrammar's strict mode, and the closing written
for llguidance), so unless the server asks for closed objects
(docs/routing.md) the schema the engines compile says
``"additionalProperties": true`` and ``"items": true`` wherever it said
nothing, and both build a schema's own opening as JSON Schema means it.
The analysis then reads the opening too, so a construct an engine gets
wrong only in an open object (on xgrammar, a listed name that is not ASCII
or holds a character JSON escapes) is found where it matters.

``true`` there constrains nothing: the schema accepts the same values. But
it evaluates every property or item, and ``unevaluatedProperties`` or
``unevaluatedItems`` elsewhere would read that: a document that still uses
either once rewritten is left as it is, and its objects stay closed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grammar_guard.core.schema.children import with_children

# Keywords by which a schema already says which names beyond its listed ones
# it allows, or which items past its prefix.
_SAYS_OBJECTS = frozenset({"additionalProperties", "unevaluatedProperties"})
_SAYS_ITEMS = frozenset({"items", "additionalItems", "unevaluatedItems"})
_UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")


def objects_opened(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: true`` and ``items: true`` where it leaves them out.

    Written next to ``properties`` or ``patternProperties``, and next to
    ``prefixItems``: where a closing engine would close. Pure: ``schema``
    comes back itself when nothing was written.
    """
    return true_keywords_added(schema, _unsaid_openings, read_by=_UNEVALUATED)


def _unsaid_openings(node: dict[str, Any]) -> tuple[str, ...]:
    added: list[str] = []
    if ("properties" in node or "patternProperties" in node) and not node.keys() & _SAYS_OBJECTS:
        added.append("additionalProperties")
    if "prefixItems" in node and not node.keys() & _SAYS_ITEMS:
        added.append("items")
    return tuple(added)


def true_keywords_added(
    schema: Any, added: Callable[[dict[str, Any]], tuple[str, ...]], *, read_by: tuple[str, ...]
) -> Any:
    """``schema`` with ``keyword: true`` in each subschema for each keyword ``added`` names there.

    ``true`` constrains nothing, but an applicator that holds it evaluates
    every property or item, which the keywords ``read_by`` read elsewhere: a
    document that mentions one is returned as it is. Pure: ``schema`` comes
    back itself when nothing was written.
    """
    text = json.dumps(schema)
    if any(keyword in text for keyword in read_by):
        return schema
    return _added(schema, added)


def _added(node: Any, added: Callable[[dict[str, Any]], tuple[str, ...]]) -> Any:
    if not isinstance(node, dict):
        return node
    rewritten = with_children(node, "", lambda child, _, __: _added(child, added))
    keywords = added(rewritten)
    return {**rewritten, **dict.fromkeys(keywords, True)} if keywords else rewritten
