"""A ``oneOf`` whose branches no value satisfies two of, written as the ``anyOf`` it then is.

``oneOf`` is "exactly one branch"; when no value is valid for two branches,
that is "at least one", an ``anyOf``, which both engines enforce and which
the rewrite can merge the node's other keywords into. The usual case is a
discriminator: each branch requires ``"kind"`` with values of its own.
Exclusivity is proved by :meth:`SchemaFacts.exclusive`, a sufficient test
(disjoint types, disjoint values, a required property whose values are
disjoint), within the node's own ``type``: a value of another type fails
the node whatever its branches say.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.facts import SchemaFacts

# Pairs of branches to test grow with the square of their number.
MAX_BRANCHES = 16


def exclusive_one_of_as_any_of(
    node: dict[str, Any], facts: SchemaFacts, keep_alive: list[Any]
) -> dict[str, Any] | None:
    """``node`` with its ``oneOf`` as ``anyOf``, if its branches are exclusive; else None.

    ``keep_alive`` holds the schemas made for the test for as long as
    ``facts`` lives: it remembers schemas by ``id``.
    """
    branches = node.get("oneOf")
    if "anyOf" in node or not isinstance(branches, list) or len(branches) > MAX_BRANCHES:
        return None
    typed = [_within_type(branch, node.get("type")) for branch in branches]
    keep_alive.extend(typed)
    for index, left in enumerate(typed):
        if not all(facts.exclusive(left, right) for right in typed[index + 1 :]):
            return None
    return {("anyOf" if key == "oneOf" else key): value for key, value in node.items()}


def _within_type(branch: Any, node_type: Any) -> Any:
    """``branch`` with the node's ``type`` where it has none of its own."""
    if node_type is None or not isinstance(branch, dict) or "type" in branch:
        return branch
    return {**branch, "type": node_type}
