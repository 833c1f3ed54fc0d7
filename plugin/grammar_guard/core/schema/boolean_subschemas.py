"""Boolean subschemas, and prefix items no array can reach, written as the engines build them.

- ``propertyNames``: ``true`` says nothing and is dropped; ``false`` lets no
  name through, which ``"maxProperties": 0`` says. Neither engine builds
  a boolean there (xgrammar: "propertyNames must be an object"; llguidance
  names the keyword unimplemented).
- ``prefixItems``: an entry ``true`` is ``{}``; the first ``false`` is a
  position no item may fill, so the entries from it on go and ``maxItems``
  stops short of it. xgrammar refuses either boolean there ("prefixItems
  must be an array of objects or booleans", "prefixItems contains false").
- ``prefixItems`` longer than ``maxItems``: entries past it describe items
  no array holds, and xgrammar refuses the schema ("maxItems is less than
  the number of prefixItems"); they go.
- an ``anyOf`` or ``oneOf`` branch ``false`` holds no value, so it adds
  nothing to either and goes, unless no other branch is left (the schema
  then holds nothing, which the engines say). xgrammar refuses it ("Schema
  'false' cannot accept any value").

Dropping entries renumbers those after them, and a reference into a dropped
one would lose its target: callers pass ``movable`` false for a schema
something refers inside of, and entries are then kept.
"""

from __future__ import annotations

from typing import Any


def booleans_written(node: dict[str, Any], *, movable: bool) -> dict[str, Any]:
    """``node`` with its boolean ``propertyNames``, ``prefixItems`` entries and ``false``
    branches written out."""
    written: dict[str, Any] = {}
    dropped: set[str] = set()
    names = node.get("propertyNames")
    if isinstance(names, bool):
        dropped.add("propertyNames")
        if names is False:
            written["maxProperties"] = 0
    for keyword in ("anyOf", "oneOf"):
        branches = node.get(keyword)
        if movable and isinstance(branches, list) and any(b is False for b in branches):
            possible = [branch for branch in branches if branch is not False]
            if possible:
                written[keyword] = possible
    prefix = node.get("prefixItems")
    if isinstance(prefix, list):
        entries, longest = _prefix_written(prefix, node.get("maxItems"), movable=movable)
        if entries is not prefix:
            if entries:
                written["prefixItems"] = entries
            else:
                dropped.add("prefixItems")  # 2020-12 asks for one entry at least
        if longest is not None:
            written["maxItems"] = longest
    if not written and not dropped:
        return node
    return {**{key: value for key, value in node.items() if key not in dropped}, **written}


def _prefix_written(prefix: list[Any], longest: Any, *, movable: bool) -> tuple[list[Any], Any]:
    """The ``prefixItems`` entries some array can fill, with ``true`` as ``{}`` (``prefix``
    itself if that changes nothing), and the ``maxItems`` a ``false`` sets (None: none)."""
    bounded = isinstance(longest, int) and not isinstance(longest, bool) and longest >= 0
    reachable = len(prefix)
    if movable:
        unfillable = next((i for i, entry in enumerate(prefix) if entry is False), len(prefix))
        reachable = min(unfillable, longest) if bounded else unfillable
    if reachable == len(prefix) and not any(entry is True for entry in prefix):
        return prefix, None
    entries = [{} if entry is True else entry for entry in prefix[:reachable]]
    sets_bound = reachable < len(prefix) and prefix[reachable] is False
    return entries, reachable if sets_bound and not (bounded and longest <= reachable) else None
