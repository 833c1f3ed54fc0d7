"""References resolved within the document, written as JSON pointers from its root.

A bundled 2020-12 schema names its parts by URI: an embedded resource has an
``$id`` (``"$id": "list"``, ``"$ref": "list"``), a location-independent name
an ``$anchor`` (``"$ref": "#item"``), and a ``$dynamicRef`` names a
``$dynamicAnchor``. xgrammar resolves none of these, and a reference inside
an embedded resource against the document root rather than that resource;
the schema rewrite does not move schemas such a document holds. Each of
these references points at a schema of the same document, so it is written
here as the JSON pointer from the root that reaches it (``"#/$defs/list"``),
and the identifiers that served only to resolve them are dropped.

Resolution follows RFC 3986 from each schema's base URI, as 2020-12 says: a
schema's ``$id`` resolved against the base of the schema around it, the
root's against a base of grammar-guard's own. Nothing is ever fetched. The
document is left as written (and refused as before) where any reference
does not resolve to a schema in it, an identifier is given twice, an
``$id`` holds a fragment (a draft-07 anchor, read as 2020-12 reads it), or a
``$dynamicRef`` could resolve to more than one schema: that is, where the
dynamic scope could decide it, because two ``$dynamicAnchor``\\ s share its
name. With one such anchor in the document, every dynamic scope finds that
one, so the reference is static.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit, uses_relative

from grammar_guard.core.schema.children import with_children
from grammar_guard.core.schema.pointers import MISSING, resolve_pointer
from grammar_guard.core.schema.vocabulary import subschemas

# The base URI of a document without an ``$id`` of its own: relative
# references and identifiers resolve against it, and it names nothing else.
_DOCUMENT_BASE = "https://document.grammar-guard.invalid/root.json"
_IDENTIFIERS = ("$id", "$anchor", "$dynamicAnchor")
# Characters a JSON pointer written into a URI fragment may hold as they are:
# any other would need the percent-encoding the engines read differently.
_PLAIN_POINTER = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/~-._$@!&'()*+,;=:"
)


class _Unresolved(Exception):
    """Some reference or identifier of the document cannot be resolved here."""


@dataclass
class _Index:
    """Where each resource and anchor of a document is, by absolute URI."""

    document: Any
    resources: dict[str, str] = field(default_factory=dict)
    anchors: dict[tuple[str, str], str] = field(default_factory=dict)
    dynamic: dict[str, int] = field(default_factory=dict)  # name -> how many

    def add(self, table: dict[Any, str], key: Any, pointer: str) -> None:
        if table.setdefault(key, pointer) != pointer:
            raise _Unresolved


def references_as_pointers(document: Any) -> Any:
    """``document`` with each reference written as a pointer from its root.

    ``document`` itself where no reference needs it (every ``$ref`` already
    a pointer from the root, outside embedded resources) or where some
    reference cannot be resolved within the document.
    """
    if not isinstance(document, dict) or not _needs_resolving(document):
        return document
    root_base = _base(document, _DOCUMENT_BASE)
    try:
        if root_base is None:
            raise _Unresolved
        index = _Index(document)
        _index(document, "", root_base, index)
        return _written(document, "", root_base, index)
    # RecursionError: a document nested past Python's stack is left as written.
    except (_Unresolved, RecursionError):
        return document


def _needs_resolving(document: dict[str, Any]) -> bool:
    """Whether a reference or identifier would resolve otherwise than as a root pointer."""
    pending: list[tuple[Any, str]] = [(document, "")]
    while pending:
        node, pointer = pending.pop()
        if not isinstance(node, dict):
            continue
        if "$dynamicRef" in node or "$anchor" in node or "$dynamicAnchor" in node:
            return True
        if pointer and "$id" in node:
            return True
        ref = node.get("$ref")
        if isinstance(ref, str) and ref != "#" and not ref.startswith("#/"):
            return True
        pending.extend(subschemas(node, pointer))
    return False


def _base(node: dict[str, Any], outer: str) -> str | None:
    """The base URI inside ``node``: its ``$id`` resolved against ``outer``; None if unusable."""
    if "$id" not in node:
        return outer
    parts = _split_resolved(outer, node["$id"])
    return None if parts is None or parts[1] else parts[0]


def _split_resolved(base: str, reference: Any) -> tuple[str, str] | None:
    """``reference`` resolved against ``base``: its URI and its fragment; None if it cannot be."""
    if not isinstance(reference, str):
        return None
    resolved = _joined(base, reference)
    return None if resolved is None else urldefrag(resolved)


def _joined(base: str, reference: str) -> str | None:
    """``reference`` resolved against ``base`` (RFC 3986); None where it cannot be.

    A relative path against a base whose scheme has no paths (``urn:``)
    resolves to nothing; a fragment alone resolves against any base.
    """
    if urlsplit(reference).scheme:
        return reference
    if reference.startswith("#"):
        return urldefrag(base)[0] + reference
    if urlsplit(base).scheme not in uses_relative:
        return None
    return urljoin(base, reference)


def _index(node: Any, pointer: str, outer: str, index: _Index) -> None:
    if not isinstance(node, dict):
        return
    base = _base(node, outer)
    if base is None:
        raise _Unresolved
    if not pointer or "$id" in node:
        index.add(index.resources, base, pointer)
    for keyword in ("$anchor", "$dynamicAnchor"):
        name = node.get(keyword)
        if name is None:
            continue
        if not isinstance(name, str):
            raise _Unresolved
        index.add(index.anchors, (base, name), pointer)
        if keyword == "$dynamicAnchor":
            index.dynamic[name] = index.dynamic.get(name, 0) + 1
    for child, where in subschemas(node, pointer):
        _index(child, where, base, index)


def _written(node: Any, pointer: str, outer: str, index: _Index) -> Any:
    if not isinstance(node, dict):
        return node
    base = _base(node, outer)
    if base is None:
        raise _Unresolved
    rebuilt = with_children(
        node, pointer, lambda child, _, where: _written(child, where, base, index)
    )
    written = {
        key: value
        for key, value in rebuilt.items()
        if key not in _IDENTIFIERS or (key == "$id" and not pointer)
    }
    if "$ref" in node and "$dynamicRef" in node:
        raise _Unresolved  # both apply; one "$ref" cannot say both
    for keyword, dynamic in (("$ref", False), ("$dynamicRef", True)):
        if keyword in node:
            del written[keyword]
            target = _target(node[keyword], base, index, dynamic=dynamic)
            written["$ref"] = _checked_pointer(target, index)
    return written


def _target(reference: Any, base: str, index: _Index, *, dynamic: bool) -> str:
    """The pointer from the root of the schema ``reference`` names, resolved against ``base``."""
    parts = _split_resolved(base, reference)
    if parts is None:
        raise _Unresolved
    resource, fragment = parts
    if resource not in index.resources:
        raise _Unresolved
    if fragment == "" or fragment.startswith("/"):
        return index.resources[resource] + fragment
    anchored = index.anchors.get((resource, fragment))
    if anchored is None or (dynamic and index.dynamic.get(fragment, 0) > 1):
        raise _Unresolved
    return anchored


def _checked_pointer(target: str, index: _Index) -> str:
    """The ``$ref`` for the pointer ``target``, checked to name a schema of the document."""
    if not set(target) <= _PLAIN_POINTER:
        raise _Unresolved
    schema = resolve_pointer(index.document, target)
    if schema is MISSING or not isinstance(schema, dict | bool):
        raise _Unresolved
    return "#" + target
