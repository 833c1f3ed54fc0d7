"""``propertyNames`` beside listed properties, decided name by name.

xgrammar checks ``propertyNames`` against the names an object adds, not
against the names ``properties`` lists (``property_names_with_properties``
in its capabilities), and ignores it next to ``additionalProperties: false``;
llguidance does not implement it. Yet each listed name is a string the
evaluator (:func:`evaluate.validates`) can decide against the
``propertyNames`` schema, and then:

- a listed name it refuses can never be in a valid object: it leaves
  ``properties`` (what its schema says of its value never applies). Were
  it required, no object would be valid, and the node stays as written;
- with every listed name passing, where no other name may be added
  (``additionalProperties: false``, no ``patternProperties`` or
  ``unevaluatedProperties``), ``propertyNames`` says nothing more and is
  dropped. Elsewhere it stays, for the names an object adds, and
  :func:`listed_names_pass` tells the analysis that the listed ones need
  no check.

One listed name left undecided, or more than :data:`MAX_NAMES`, leaves the
node as written.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.evaluate import validates

# Listed names decided per node; past that, the node stays as written.
MAX_NAMES = 64
# Keywords beside which names other than the listed ones may be in an object.
_MORE_NAMES = ("patternProperties", "unevaluatedProperties")


def property_names_decided(node: dict[str, Any]) -> dict[str, Any] | None:
    """``node`` with its listed names decided against its ``propertyNames``; None: unchanged."""
    names_schema = node.get("propertyNames")
    properties = node.get("properties", {})
    if not isinstance(names_schema, dict) or not isinstance(properties, dict):
        return None
    verdicts = _verdicts(properties, names_schema)
    if verdicts is None:
        return None
    refused = {name for name, passes in verdicts.items() if not passes}
    required = node.get("required", [])
    if refused and (not isinstance(required, list) or refused & set(required)):
        return None
    result = dict(node)
    if refused:
        result["properties"] = {k: v for k, v in properties.items() if k not in refused}
    closed = node.get("additionalProperties") is False and not any(k in node for k in _MORE_NAMES)
    if closed:
        del result["propertyNames"]
    return result if refused or closed else None


def listed_names_pass(node: dict[str, Any]) -> bool:
    """Whether each name in ``node``'s ``properties`` is decided to pass its ``propertyNames``."""
    properties = node.get("properties", {})
    if not isinstance(properties, dict):
        return False
    verdicts = _verdicts(properties, node.get("propertyNames", True))
    return verdicts is not None and all(verdicts.values())


def _verdicts(properties: dict[str, Any], names_schema: Any) -> dict[str, bool] | None:
    if len(properties) > MAX_NAMES:
        return None
    verdicts = {name: validates(name, names_schema) for name in properties}
    if None in verdicts.values():
        return None
    return {name: bool(passes) for name, passes in verdicts.items()}
