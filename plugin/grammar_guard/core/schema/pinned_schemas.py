"""Which schemas of a document must keep their shape: those a reference points inside of.

Moving a subschema is only safe where nothing refers into it. Each local
``$ref`` pins the schemas on its way to its target, but for the definitions
it passes through, which the rewrite keeps in place; a reference that is
not a local JSON pointer, an embedded ``$id`` or a keyword whose meaning
depends on where it sits pins the whole document. Read once per document by
:class:`~grammar_guard.core.schema.rewrite_walks.Rewrite`, before it walks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

from grammar_guard.core.schema.vocabulary import subschemas

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
DEFINITIONS = ("$defs", "definitions")


def local_pointer(ref: str) -> str | None:
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


def pinned_pointers(document: Any) -> frozenset[str] | None:
    """The schemas some ``$ref`` points inside of (not just at), which must keep their shape.

    A reference into a parent's definitions does not pin the parent: the
    rewrites keep definitions where they are. None: the document holds a
    reference that is not a local JSON pointer, an embedded ``$id``, or a
    keyword from :data:`_PLACE_BOUND`, and nothing in it may move.
    """
    pinned: set[str] = set()
    for node, pointer in schemas(document):
        if _PLACE_BOUND & node.keys() or ("$id" in node and pointer):
            return None
        if "$ref" not in node:
            continue
        ref = node["$ref"]
        target = local_pointer(ref) if isinstance(ref, str) else None
        if target is None:
            return None
        tokens = target.split("/")
        for depth in range(1, len(tokens)):
            if tokens[depth] not in DEFINITIONS:
                pinned.add("/".join(tokens[:depth]))
    return frozenset(pinned)


def schemas(document: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object in ``document`` reached through subschema keywords, with its pointer."""
    pending: list[tuple[Any, str]] = [(document, "")]
    while pending:
        node, pointer = pending.pop()
        if isinstance(node, dict):
            yield node, pointer
            pending.extend(subschemas(node, pointer))
