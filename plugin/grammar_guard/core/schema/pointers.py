"""JSON pointers (RFC 6901) into a schema document: writing them and following them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class _Missing:
    pass


# What a pointer to nothing resolves to: None is a JSON value, so it cannot say that.
MISSING: Any = _Missing()


def pointer_token(key: str | int) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def join_pointer(base: str, *keys: str | int) -> str:
    return base + "".join("/" + pointer_token(key) for key in keys)


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer ("" is the whole document), or :data:`MISSING` if absent."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        return MISSING
    *_, target = _steps(document, pointer)
    return target


def under_embedded_resource(document: Any, pointer: str) -> bool:
    """Whether some schema on the path to ``pointer`` (not the root) has its own ``$id``."""
    if not pointer:
        return False
    return any(isinstance(node, dict) and "$id" in node for node in _steps(document, pointer))


def _steps(document: Any, pointer: str) -> Iterator[Any]:
    """Each value on the way to ``pointer`` (which starts with "/"), ending at
    its target, or at :data:`MISSING` where a token names nothing."""
    node = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            yield MISSING
            return
        yield node
