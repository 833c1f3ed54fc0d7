"""``dependentRequired``, ``dependentSchemas`` and draft-07 ``dependencies`` as an ``anyOf``.

``{"dependentRequired": {"a": ["b"]}}`` says: an object that has ``a`` has
``b`` too. Neither engine enforces it, but each trigger name splits the
objects in two, those without it and those with it that meet its
dependency, and both halves are schemas the engines know::

    {"anyOf": [{R..., "properties": {"a": false}},
               {R..., "required": ["a", "b"]}]}

``R`` is the rest of the schema, merged into each branch: xgrammar reads an
``anyOf`` and ignores what stands beside it, so only annotations and
definitions stay there. Several triggers make one branch per choice of
"absent" or "present" for each, so their number is bounded. A dependency
schema (``dependentSchemas``) is merged into the "present" branch.

Fewer triggers split the objects than are written. One that ``R``
requires is in every object that passes, so where ``R`` admits objects
alone (or the dependency only names more), it is merged into ``R``
instead; a dependency asking only for names ``R`` requires asks
nothing. Triggers asking for the same names split them once: each absent
or its names present is "all absent, or the names present", whether any
trigger is there or not.

``properties`` and ``required`` constrain objects only: a value of another
type passes the "absent" branches exactly when it passes ``R``, as it
passed the schema, so the ``anyOf`` accepts exactly what the schema did.

``dependencies`` is the draft-07 keyword 2020-12 split in two: an array is a
``dependentRequired`` entry, a schema a ``dependentSchemas`` one. 2020-12 no
longer defines it, but the analysis reads it as the constraint its writer
meant (``LEGACY_KEYWORDS``), as the JSON-Schema-Test-Suite's
``dependencies-compatibility`` tests do, and so does this rewrite.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import count_values
from grammar_guard.core.schema.vocabulary import (
    ANNOTATIONS,
    KNOWN_KEYWORDS,
    STRUCTURAL,
    subschemas,
)

# One schema holding exactly when each of several does (AllOfMerger.conjoin).
Conjoin = Callable[[Iterable[Any]], Any]
# A draft-07 ``dependencies`` schema rewritten as its siblings were: (schema, trigger name).
RewriteLegacy = Callable[[Any, str], Any]

KEYWORDS = ("dependentRequired", "dependentSchemas", "dependencies")
MAX_TRIGGERS = 3  # groups of triggers: 2**3 = 8 branches
# Folding required triggers repeats once per trigger: their number is bounded first.
MAX_TRIGGERS_READ = 64
# Keywords xgrammar reads alone (or that the merge left as they were): an
# anyOf next to them would be ignored, or they next to it.
_EXCLUSIVE = frozenset({"$ref", "$dynamicRef", "const", "enum", "anyOf", "oneOf", "allOf"})
# Inside a draft-07 ``dependencies`` schema, what the rewrite's guard on
# references and places (rewrite._pinned_pointers) does not see: that walk
# does not enter ``dependencies``, so such a schema is not moved at all.
_PLACE_BOUND = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "$id",
        "$anchor",
        "$dynamicAnchor",
        "$recursiveAnchor",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
# The written size the anyOf may reach: copying the rest into every branch
# must not take the whole document past the rewrite's own growth bound, which
# would leave all of it as written.
_GROWTH = 2
_GROWTH_SLACK = 256
_MAX_COUNTED = 1 << 16  # a larger schema may grow no further than one this large


def dependencies_as_any_of(
    node: dict[str, Any], written: Any, conjoin: Conjoin, rewrite_legacy: RewriteLegacy
) -> dict[str, Any] | None:
    """``node`` with its dependency keywords written as an ``anyOf``; None where not exact.

    ``written`` is the schema as the client wrote it, before any rewrite of
    it or inside it: the result may be at most about twice its size, so
    that nested dependencies, each copying the ones inside, cannot compound.
    Left as written: a schema with a keyword xgrammar reads alone, a
    keyword value that is not what its draft defines (the engine reports
    it), more than :data:`MAX_TRIGGERS_READ` trigger names or
    :data:`MAX_TRIGGERS` splits, a branch the merge cannot write as one
    schema, and a result past the growth bound.
    """
    if not node.keys() & set(KEYWORDS) or node.keys() & _EXCLUSIVE:
        return None
    triggers = _triggers(node, rewrite_legacy)
    if triggers is None or len(triggers) > MAX_TRIGGERS_READ:
        return None
    beside = {k: v for k, v in node.items() if k not in KEYWORDS and _neutral(k)}
    rest = {k: v for k, v in node.items() if k not in KEYWORDS and not _neutral(k)}
    always, live = _fold_required_triggers(rest, triggers)
    groups = _grouped(live)
    if len(groups) > MAX_TRIGGERS:
        return None
    rest = conjoin([rest, *always]) if always else rest
    if not isinstance(rest, dict) or "allOf" in rest:
        return None  # no object meets it, or the parts do not merge: left as written
    branches: list[Any] = []
    for choice in itertools.product((False, True), repeat=len(groups)):
        parts: list[Any] = [rest]
        for present, (names, needs) in zip(choice, groups, strict=True):
            if not present:
                parts.append({"properties": dict.fromkeys(names, False)})
            else:
                # Each trigger absent, or the dependency met: whether the
                # trigger is there too makes no difference, so one is named
                # only where it alone asks for it.
                parts += [{"required": list(names)}, *needs] if len(names) == 1 else needs
        branch = conjoin(parts)
        if branch is False or (admits_no_object(branch) and (branches or _objects_only(branch))):
            # On values other than objects a branch only narrows R, and the
            # first one (every trigger absent) is R there: a branch that
            # admits no object adds nothing, nor does the first where R
            # admits objects only (an engine would refuse it as written).
            continue
        if not isinstance(branch, dict) or "allOf" in branch:
            return None  # the parts do not merge into one schema
        branches.append(branch)
    if not branches:
        return None  # no object meets it: left for the engines to say so
    result = {**beside, **branches[0]} if len(branches) == 1 else {**beside, "anyOf": branches}
    limit = _GROWTH * count_values(written, _MAX_COUNTED) + _GROWTH_SLACK
    return result if count_values(result, limit) <= limit else None


def _fold_required_triggers(
    rest: dict[str, Any], triggers: dict[str, list[Any]]
) -> tuple[list[Any], dict[str, list[Any]]]:
    """The dependencies that always apply, and the triggers left that split the objects.

    A trigger the rest requires is present in every object that passes, so
    its dependency holds without a branch (where the rest admits objects
    only, or the dependency only requires names: other values have no
    trigger to meet it); so does a dependency that only requires names
    already required. Folding one may require more names,
    so this repeats until nothing changes (at most once per trigger).
    """
    required = _required_names(rest)
    # Only objects have names: a dependency that constrains other values too
    # is folded only where the rest admits objects alone.
    objects_only = _objects_only(rest)
    always: list[Any] = []
    live = dict(triggers)
    changed = True
    while changed:
        changed = False
        for name in list(live):
            needs = [need for need in live[name] if not _already_met(need, required)]
            if name in required and (objects_only or all(_asked(n) is not None for n in needs)):
                always.extend(needs)
                for need in needs:
                    required |= _required_names(need)
                del live[name]
                changed = True
            elif needs:
                live[name] = needs
            else:
                del live[name]
    return always, live


def _grouped(live: dict[str, list[Any]]) -> list[tuple[tuple[str, ...], list[Any]]]:
    """Triggers that require the same names, as one: "all absent, or those names present".

    Only names are compared: a dependency schema keeps its trigger to itself.
    """
    groups: dict[Any, tuple[list[str], list[Any]]] = {}
    for name, needs in live.items():
        asked = [_asked(need) for need in needs]
        key: Any = name
        if all(names is not None for names in asked):
            key = frozenset().union(*(names for names in asked if names is not None))
        groups.setdefault(key, ([], needs))[0].append(name)
    return [(tuple(names), needs) for names, needs in groups.values()]


def _asked(need: Any) -> frozenset[str] | None:
    """The names a ``{"required": [...]}`` dependency asks for; None for any other."""
    if isinstance(need, dict) and set(need) == {"required"}:
        return frozenset(_required_names(need))
    return None


def _already_met(need: Any, required: set[str]) -> bool:
    asked = _asked(need)
    return asked is not None and asked <= required


def _required_names(schema: Any) -> set[str]:
    required = schema.get("required") if isinstance(schema, dict) else None
    if not isinstance(required, list):
        return set()
    return {name for name in required if isinstance(name, str)}


def _triggers(node: dict[str, Any], rewrite_legacy: RewriteLegacy) -> dict[str, list[Any]] | None:
    """Each trigger name's dependencies, as schemas that constrain; None: a malformed value."""
    triggers: dict[str, list[Any]] = {}
    for keyword in KEYWORDS:
        if keyword not in node:
            continue
        entries = node[keyword]
        if not isinstance(entries, dict):
            return None
        for name, dependency in entries.items():
            needs = triggers.setdefault(name, [])
            if isinstance(dependency, list) and keyword != "dependentSchemas":
                if not all(isinstance(other, str) for other in dependency):
                    return None
                if dependency:
                    needs.append({"required": list(dict.fromkeys(dependency))})
            elif isinstance(dependency, dict | bool) and keyword != "dependentRequired":
                if keyword == "dependencies":
                    if not _self_contained(dependency):
                        return None
                    dependency = rewrite_legacy(dependency, name)
                if not _vacuous(dependency):
                    needs.append(dependency)
            else:
                return None
    return triggers


def admits_no_object(branch: Any) -> bool:
    """Whether ``branch`` requires a name it forbids (a sufficient test): no object passes it."""
    if not isinstance(branch, dict):
        return False
    required = branch.get("required")
    properties = branch.get("properties", {})
    if not isinstance(required, list) or not isinstance(properties, dict):
        return False
    # Without patterns, a name not listed is an additional property.
    closed = branch.get("additionalProperties") is False and "patternProperties" not in branch
    return any(
        properties[name] is False if name in properties else closed
        for name in required
        if isinstance(name, str)
    )


def _objects_only(branch: dict[str, Any]) -> bool:
    return branch.get("type") in ("object", ["object"])


def _self_contained(schema: Any) -> bool:
    """Whether nothing under ``schema`` refers elsewhere, is referred to, or reads its place."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            continue
        if node.keys() & _PLACE_BOUND:
            return False
        pending.extend(child for child, _ in subschemas(node, ""))
        legacy = node.get("dependencies")
        if isinstance(legacy, dict):
            pending.extend(legacy.values())
    return True


def _vacuous(schema: Any) -> bool:
    """Whether ``schema`` accepts every value: a dependency that asks nothing."""
    if isinstance(schema, dict):
        return not any(can_fail(key, value, schema) for key, value in schema.items())
    return schema is True


def _neutral(key: str) -> bool:
    """Whether ``key`` constrains no instance: it may stay beside the ``anyOf``."""
    return key in ANNOTATIONS or key in STRUCTURAL or key not in KNOWN_KEYWORDS
