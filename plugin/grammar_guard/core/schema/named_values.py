"""A schema that names its values (``enum``, ``const``) written as the named values that pass it.

xgrammar reads an ``enum`` or ``const`` alone, and so drops what stands
beside it: ``{"enum": ["ab", "cd"], "pattern": "^a"}`` would let ``"cd"``
through. Where every named value is decided against the rest of the schema
(:func:`evaluate.values_split`: patterns and ``patternProperties`` too, not
references or formats), the schema is exactly the values that pass, and is
written as that ``enum`` (a ``const`` that passes stays one), with its
annotations and definitions; where none passes, as ``false`` (a schema
holding definitions stays as written then). A value left undecided keeps
the schema as written.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.negation import MAX_NAMED_VALUES, named_values_written
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.vocabulary import ANNOTATIONS, STRUCTURAL


def named_values_decided(node: dict[str, Any]) -> Any:
    """``node`` as the named values that pass the rest of it; None where not decided."""
    # An enum beside a const: the enum's values, each held to the const too.
    named_key = "enum" if "enum" in node else "const" if "const" in node else None
    if named_key is None:
        return None
    named = node["enum"] if named_key == "enum" else [node["const"]]
    if not isinstance(named, list) or not 0 < len(named) <= MAX_NAMED_VALUES:
        return None
    kept = {key: value for key, value in node.items() if key in ANNOTATIONS or key in STRUCTURAL}
    # Whole: keywords read together (properties beside additionalProperties)
    # must stay together, even those that alone constrain nothing.
    rest = {key: value for key, value in node.items() if key != named_key and key not in kept}
    if not any(can_fail(key, value, node) for key, value in rest.items()):
        return None  # nothing beside the values: nothing to write
    return named_values_written(node, kept, named, rest, passing=True)
