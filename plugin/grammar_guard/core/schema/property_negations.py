"""A branch's property entries with their ``not``\\ s written as the values they leave.

A literal on a ``properties`` entry of named values has a ``not`` of them
for its complement (:mod:`~grammar_guard.core.schema.boolean_literals`);
merged into a branch beside what the node says of the property, that
``not`` is written here as the values left (an ``enum``, or ``false``), or
by the simplest rewrites of ``not``
(:mod:`~grammar_guard.core.schema.negation`). Kept apart from the normal
form, which never reads a property's values: this runs on each branch
:mod:`~grammar_guard.core.schema.boolean_forms` writes, once merged.
"""

from __future__ import annotations

from typing import Any

from grammar_guard.core.schema.evaluate import values_split
from grammar_guard.core.schema.negation import MAX_NAMED_VALUES, negation_rewritten


def values_decided(branch: Any) -> Any:
    """``branch`` with the ``not`` of each property value written as the values it leaves.

    A complement of named values (``"not": {"const": true}``) becomes, merged
    with what the node says of the property (``"type": "boolean"``), the
    values left. None where a ``not`` cannot be written so (a string not
    among some): the node stays as written.
    """
    properties = branch.get("properties") if isinstance(branch, dict) else None
    if not isinstance(properties, dict):
        return branch
    decided = {}
    for name, entry in properties.items():
        if isinstance(entry, dict) and entry.keys() & {"not", "allOf"}:
            entry = _entry_decided(entry)
            if entry is None:
                return None
        decided[name] = entry
    return {**branch, "properties": decided} if decided != properties else branch


def _entry_decided(entry: dict[str, Any]) -> Any:
    """A merged property entry with its ``not``\\ s written out; None where one stays.

    Several complements of one property merge into an ``allOf`` of ``not``\\ s
    beside the values the node names: those values are then decided one by
    one against the whole entry (:func:`evaluate.validates`), and the entry
    is the ``enum`` of those that pass.
    """
    named = _named_values(entry)
    if named is not None:
        split = values_split(named, entry)
        if split is None:
            return None
        left, _ = split
        return {"enum": left} if left else False
    if "not" not in entry:
        return entry  # an allOf of the client's own, left as it was
    written = negation_rewritten(entry)
    return None if written is None or (isinstance(written, dict) and "not" in written) else written


def _named_values(entry: dict[str, Any]) -> list[Any] | None:
    """The values an entry names (its ``const`` or ``enum``, or an ``allOf`` part's), if few."""
    for part in [entry, *(entry.get("allOf") or [])]:
        if not isinstance(part, dict):
            continue
        named = [part["const"]] if "const" in part else part.get("enum")
        if isinstance(named, list) and len(named) <= MAX_NAMED_VALUES:
            return named
    return None
