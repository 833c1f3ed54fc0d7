"""JSON objects and tuples closed for llguidance where xgrammar closes them.

xgrammar (as grammar-guard runs it) allows no property beyond those an
object schema lists, and no item beyond a tuple's ``prefixItems``, unless
the schema says otherwise; llguidance follows JSON Schema and allows them.
Closed the same way, a request gets the same output language whichever
engine serves it, and a weak model cannot pad an object with invented keys.

Closing narrows what a schema accepts, so it happens only where a narrower
subschema cannot widen the whole: never below a ``not``, an ``if`` or a
``contains`` (which ``maxContains`` may bound), nor below a ``oneOf``
unless every branch, closed, lacks a name each other branch requires (then
no value passes one closed branch that another accepts).

Closing never forbids a name the schema itself names: a name the object
``required`` but did not list, or one that a branch of its ``anyOf`` or
``oneOf`` lists or requires, is listed as any value (the schema constrains
it where it named it). Without that, a schema such as
``{"properties": {"id": ...}, "oneOf": [{"properties": {"kind": ...},
"required": ["kind"]}]}`` would allow no object at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grammar_guard.core.schema.vocabulary import SCHEMA_LISTS, SCHEMA_MAPS, SCHEMA_VALUES

# Keywords by which a schema allows names beyond those it lists: it is left open.
_OPENING_OBJECT_KEYWORDS = frozenset(
    {"additionalProperties", "patternProperties", "unevaluatedProperties"}
)
_OPENING_ARRAY_KEYWORDS = frozenset({"items", "additionalItems", "unevaluatedItems"})
# Applicators whose branches are matched against the instance the schema holding them is.
_BRANCHES = ("anyOf", "oneOf")
# Where closing an object could let a value in, so nothing below is closed: a
# oneOf accepts a value valid for two branches once one of them is narrowed
# (the rewrite writes a oneOf whose branches exclude one another as anyOf),
# a not or an if reads its schema negated, and a maxContains counts fewer
# items matching a narrower contains.
_NOT_NARROWED = frozenset({"oneOf", "not", "if", "contains"})
# Pairs of oneOf branches to compare grow with the square of their number.
_MAX_CLOSED_ONE_OF = 16
# Keywords of a schema that say which names or values its objects have. A
# branch next to one is not closed on its own: it would forbid names its
# parent allows (enum and const list the values outright).
_OWN_OBJECT_KEYWORDS = frozenset(
    {*_OPENING_OBJECT_KEYWORDS, "properties", "required", "enum", "const"}
)
# In a branch, keywords that may bring names the closing cannot list.
_UNLISTABLE_IN_BRANCH = frozenset({*_OPENING_OBJECT_KEYWORDS, "$ref", "allOf", *_BRANCHES})


def closed_like_xgrammar(schema: Any) -> Any:
    """``schema`` with objects and tuples closed where xgrammar's strict mode closes them.

    A document with a ``$ref`` below a ``oneOf``, ``not``, ``if`` or ``contains`` is left
    as it is: closing the schema it refers to would narrow that place too.
    The members of an ``allOf``, and a schema next to one, are left open:
    closing them would forbid the properties the other members add. So is a
    schema whose ``anyOf`` or ``oneOf`` branches may bring names that cannot
    be listed (a ``$ref``, an applicator of their own, an opening keyword),
    and the branches of a schema that is open or lists names of its own.
    """
    if _refers_from_negated_place(schema):
        return schema
    return _closed(schema, open_here=False)


def _refers_from_negated_place(schema: Any) -> bool:
    """Whether a ``$ref`` sits where nothing is narrowed: its target must stay as is.

    Linear: one walk, with each subschema's place (below one or not) carried down.
    """
    pending: list[tuple[Any, bool]] = [(schema, False)]
    while pending:
        node, negated = pending.pop()
        if not isinstance(node, dict):
            continue
        if negated and node.keys() & {"$ref", "$dynamicRef"}:
            return True
        for keyword, value in node.items():
            below = negated or keyword in _NOT_NARROWED
            if keyword in SCHEMA_MAPS and isinstance(value, dict):
                pending.extend((item, below) for item in value.values())
            elif keyword in SCHEMA_LISTS and isinstance(value, list):
                pending.extend((item, below) for item in value)
            elif keyword in SCHEMA_VALUES:
                pending.append((value, below))
    return False


def _closed(node: Any, *, open_here: bool, names_too: Sequence[str] = ()) -> Any:
    """``node`` closed; ``names_too``: names to list beside its own (a parent's required ones)."""
    if not isinstance(node, dict):
        return node
    # A branch of an open schema is open too: it may be all that lists a name.
    branches_open = open_here or bool(_OWN_OBJECT_KEYWORDS & node.keys())
    result = {
        key: _closed_child(key, value, branches_open=branches_open) for key, value in node.items()
    }
    if open_here or "allOf" in node:
        return result
    if (one_of := _one_of_closed(node)) is not None:
        result["oneOf"] = one_of
    if (listed := _names_listed_when_closed(node)) is not None:
        result["additionalProperties"] = False
        result["properties"] = _with_names_listed(result["properties"], [*listed, *names_too])
    if "prefixItems" in node and not _OPENING_ARRAY_KEYWORDS & node.keys():
        result["items"] = False
    return result


def _closed_child(keyword: str, value: Any, *, branches_open: bool) -> Any:
    if keyword in _NOT_NARROWED:
        return value
    if keyword in SCHEMA_MAPS and isinstance(value, dict):
        return {name: _closed(item, open_here=False) for name, item in value.items()}
    if keyword in SCHEMA_LISTS and isinstance(value, list):
        open_here = keyword == "allOf" or (keyword in _BRANCHES and branches_open)
        return [_closed(item, open_here=open_here) for item in value]
    if keyword in SCHEMA_VALUES:
        return _closed(value, open_here=False)
    return value  # a value (enum, const, default...), not a schema


def _names_listed_when_closed(node: dict[str, Any]) -> list[str] | None:
    """The names ``node`` lists when closed, beyond ``properties``; None if it is not closed."""
    if "properties" not in node or _OPENING_OBJECT_KEYWORDS & node.keys() or "allOf" in node:
        return None
    names = _names_branches_add(node)
    return None if names is None else [*_strings(node.get("required")), *names]


def _one_of_closed(node: dict[str, Any]) -> list[Any] | None:
    """The ``oneOf`` branches of ``node`` closed, where that keeps the ``oneOf`` exact; else None.

    A closed branch narrows what it accepts, and a value the other branches
    accept too would then pass through them alone. So each branch must be
    closed, over its own names and those ``node`` requires, and each must
    then lack a name that every other branch requires: no object a closed
    branch accepts is valid for another.
    """
    branches = node.get("oneOf")
    if not isinstance(branches, list) or not 2 <= len(branches) <= _MAX_CLOSED_ONE_OF:
        return None
    required = _strings(node.get("required"))
    listed: list[frozenset[str]] = []
    for branch in branches:
        names = _names_listed_when_closed(branch) if isinstance(branch, dict) else None
        if names is None:
            return None
        listed.append(frozenset([*branch["properties"], *names, *required]))
    for index, names in enumerate(listed):
        for other, branch in enumerate(branches):
            if other != index and set(_strings(branch.get("required"))) <= names:
                return None
    return [_closed(branch, open_here=False, names_too=required) for branch in branches]


def _names_branches_add(node: dict[str, Any]) -> list[str] | None:
    """The names the ``anyOf``/``oneOf`` branches of ``node`` list or require; None if unknown."""
    names: list[str] = []
    for keyword in _BRANCHES:
        branches = node.get(keyword)
        if not isinstance(branches, list):
            continue
        for branch in branches:
            if not isinstance(branch, dict):
                continue  # true and false name nothing
            if _UNLISTABLE_IN_BRANCH & branch.keys():
                return None
            listed = branch.get("properties")
            if isinstance(listed, dict):
                names.extend(listed)
            names.extend(_strings(branch.get("required")))
    return names


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _with_names_listed(properties: Any, names: list[str]) -> Any:
    """``properties`` with each of ``names`` it lacks added as any value (``{}``)."""
    if not isinstance(properties, dict):
        return properties
    missing = {name: {} for name in names if name not in properties}
    return {**properties, **missing} if missing else properties
