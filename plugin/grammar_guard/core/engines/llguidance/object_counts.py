"""Property counts of closed objects written the way llguidance builds them.

llguidance 1.7 builds ``minProperties`` and ``maxProperties`` only where an
object requires every property it lists, and refuses the schema otherwise
("min/maxProperties only supported when all keys listed in "properties" are
required"). Schemas generated from code often bound a closed object by the
number of properties it lists, which says nothing more. An object closed by
``additionalProperties: false``, with no ``patternProperties``, holds only
names its ``properties`` lists, so:

- ``maxProperties`` of at least that many names can never fail, and goes;
- ``minProperties`` of at most as many names as ``required`` holds can never
  fail, closed or not, and goes;
- ``minProperties`` of exactly that many names asks for every one of them,
  and becomes a ``required`` of them all.

Each object accepts the same values after as before. Any other count is left
as written, for llguidance to refuse (xgrammar builds every count).
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.vocabulary import closed_object_names, every_schema


def decide_object_counts(schema: Any) -> None:
    """Rewrite, in place, the property counts of ``schema``'s objects that say nothing more."""
    for node in every_schema(schema):
        _decide(node)


def _decide(node: dict[str, Any]) -> None:
    required = node.get("required")
    # In the order written, once each: the grammar text must not vary between processes.
    required_names = list(
        dict.fromkeys(name for name in required if isinstance(name, str))
        if isinstance(required, list)
        else ()
    )
    least = _count(node.get("minProperties"))
    if least is not None and least <= len(required_names):
        del node["minProperties"]
    listed = closed_object_names(node)
    if listed is None:
        return
    most = _count(node.get("maxProperties"))
    if most is not None and most >= len(listed):
        del node["maxProperties"]
    least = _count(node.get("minProperties"))
    if least is not None and least == len(listed):
        del node["minProperties"]
        node["required"] = [
            *required_names,
            *(name for name in listed if name not in required_names),
        ]


def _count(value: Any) -> int | None:
    """``value`` as a property count; None where it is not a whole count (left to the engine)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
