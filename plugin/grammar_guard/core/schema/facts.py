"""What the schemas of one document validate at most: their types, their
values and the properties an object must have, or may have at most."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from grammar_guard.core.schema.bound_intervals import BOUND_FAMILIES, EVERY_NUMBER, Interval
from grammar_guard.core.schema.evaluate import validates
from grammar_guard.core.schema.pattern_overlap import patterns_overlap
from grammar_guard.core.schema.pattern_starts import first_chars
from grammar_guard.core.schema.pointers import MISSING, resolve_pointer
from grammar_guard.core.schema.values import canonical, expand_number, json_type, type_set
from grammar_guard.core.schema.vocabulary import JSON_TYPES, closed_object_names

_Fact = TypeVar("_Fact")
# Patterns compared per schema: each pair is read, so their number is bounded.
_MAX_PATTERNS = 4
# Names both sides require, and schemas per name, compared one level down.
MAX_COMPARED_NAMES = 64
_MAX_PROPERTY_SCHEMAS = 4
# Named values decided against the other side of an exclusivity test: at
# most this many per side, and this many evaluations per document in all.
_MAX_DECIDED_VALUES = 32
_MAX_EVALUATIONS = 128
# State pairs the patterns of one document may visit when compared
# (pattern_overlap.py): two format patterns take from a few hundred to 5,400.
_MAX_OVERLAP_WORK = 10_000
# Each pattern read once however many branches it is compared with.
_first_chars = functools.lru_cache(maxsize=256)(first_chars)


class SchemaFacts:
    """Upper bounds on what schemas of one document validate, memoised per schema object.

    Used to prove oneOf branches exclusive and keywords redundant. Memoised so
    that a hostile document (branches referencing branches) costs linear time.
    """

    # Lookups nested deeper than this give up, answering what claims nothing.
    MAX_DEPTH = 64
    # Exclusivity tests one document may ask for; past them none proves anything
    # (which only refuses more), so many wide oneOfs cost bounded time.
    MAX_COMPARISONS = 20_000

    def __init__(self, root: Any) -> None:
        self.root = root
        self._types: dict[int, frozenset[str]] = {}
        self._named: dict[int, tuple[Any, ...] | None] = {}
        self._values: dict[int, frozenset[Any] | None] = {}
        self._required: dict[int, dict[str, frozenset[Any]]] = {}
        self._names: dict[int, frozenset[str]] = {}
        self._allowed: dict[int, frozenset[str] | None] = {}
        self._property_values: dict[int, dict[str, frozenset[Any]]] = {}
        self._patterns: dict[int, tuple[str, ...]] = {}
        self._property_schemas: dict[int, dict[str, tuple[Any, ...]]] = {}
        self._intervals: list[dict[int, Interval]] = [{} for _ in BOUND_FAMILIES]
        self._depth = 0
        self._comparisons_left = self.MAX_COMPARISONS
        self._evaluations_left = _MAX_EVALUATIONS
        self._overlap_work_left = _MAX_OVERLAP_WORK
        self._overlaps: dict[tuple[str, str], bool | None] = {}

    def _memoised(
        self,
        memo: dict[int, _Fact],
        schema: dict[str, Any],
        unknown: _Fact,
        compute: Callable[[dict[str, Any]], _Fact],
    ) -> _Fact:
        """``compute(schema)``, once per schema object.

        ``unknown`` is the answer that claims nothing: given past
        :attr:`MAX_DEPTH` and to a lookup that cycles back to ``schema``
        while it is being computed.
        """
        key = id(schema)
        if key in memo:
            return memo[key]
        if self._depth >= self.MAX_DEPTH:
            return unknown
        memo[key] = unknown
        self._depth += 1
        try:
            fact = compute(schema)
        finally:
            self._depth -= 1
        memo[key] = fact
        return fact

    def target(self, schema: dict[str, Any]) -> Any:
        ref = schema.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            return resolve_pointer(self.root, ref[1:])
        return MISSING

    def _parts(self, schema: dict[str, Any]) -> list[Any]:
        """The schemas every value of ``schema`` is also valid against: its target, its allOf."""
        target = self.target(schema)
        parts = [target] if target is not MISSING else []
        if isinstance(schema.get("allOf"), list):
            parts.extend(schema["allOf"])
        return parts

    def types(self, schema: Any) -> frozenset[str]:
        """The JSON types of the values ``schema`` validates, at most."""
        if schema is False:
            return frozenset()
        if not isinstance(schema, dict):
            return JSON_TYPES
        return self._memoised(self._types, schema, JSON_TYPES, self._compute_types)

    def _compute_types(self, schema: dict[str, Any]) -> frozenset[str]:
        types = JSON_TYPES
        if "type" in schema:
            types &= type_set(schema["type"])
        if "const" in schema:
            types &= expand_number(frozenset({json_type(schema["const"])}))
        if isinstance(schema.get("enum"), list):
            types &= expand_number(frozenset(json_type(v) for v in schema["enum"]))
        target = self.target(schema)
        if target is not MISSING:
            types &= self.types(target)
        if isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                types &= self.types(branch)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                types &= frozenset().union(*(self.types(branch) for branch in branches))
        return types

    def named(self, schema: Any) -> tuple[Any, ...] | None:
        """The values ``schema`` allows at most, as written, if it names them (const/enum)."""
        if not isinstance(schema, dict):
            return None
        return self._memoised(self._named, schema, None, self._compute_named)

    def _compute_named(self, schema: dict[str, Any]) -> tuple[Any, ...] | None:
        if "const" in schema:
            return (schema["const"],)
        if isinstance(schema.get("enum"), list):
            return tuple(schema["enum"])
        for candidate in self._parts(schema):
            found = self.named(candidate)
            if found is not None:
                return found
        return None

    def values(self, schema: Any) -> frozenset[Any] | None:
        """The canonical values ``schema`` allows, if it names them (const/enum); else None."""
        if not isinstance(schema, dict):
            return None
        return self._memoised(self._values, schema, None, self._compute_values)

    def _compute_values(self, schema: dict[str, Any]) -> frozenset[Any] | None:
        named = self.named(schema)
        return None if named is None else frozenset(canonical(value) for value in named)

    def required_values(self, schema: Any) -> dict[str, frozenset[Any]]:
        """Properties an object must have whose values are limited to a known set."""
        if not isinstance(schema, dict):
            return {}
        return self._memoised(self._required, schema, {}, self._compute_required_values)

    def _compute_required_values(self, schema: dict[str, Any]) -> dict[str, frozenset[Any]]:
        # A name one part requires and another limits is limited in every valid object.
        values = self.property_values(schema)
        return {name: values[name] for name in self.required_names(schema) if name in values}

    def property_values(self, schema: Any) -> dict[str, frozenset[Any]]:
        """Properties whose values, where an object has them, are limited to a known set."""
        if not isinstance(schema, dict):
            return {}
        return self._memoised(self._property_values, schema, {}, self._compute_property_values)

    def _compute_property_values(self, schema: dict[str, Any]) -> dict[str, frozenset[Any]]:
        found: dict[str, frozenset[Any]] = {}
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, subschema in properties.items():
                values = self.values(subschema)
                if values is not None:
                    found[name] = values
        for part in self._parts(schema):
            for name, values in self.property_values(part).items():
                # Each part holds: a value meets both limits.
                found[name] = found[name] & values if name in found else values
        return found

    def required_names(self, schema: Any) -> frozenset[str]:
        """Names an object valid against ``schema`` must have."""
        if not isinstance(schema, dict):
            return frozenset()
        return self._memoised(self._names, schema, frozenset(), self._compute_required_names)

    def _compute_required_names(self, schema: dict[str, Any]) -> frozenset[str]:
        required = schema.get("required")
        names = (
            frozenset(n for n in required if isinstance(n, str))
            if isinstance(required, list)
            else frozenset()
        )
        target = self.target(schema)
        if target is not MISSING:
            names |= self.required_names(target)
        if isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                names |= self.required_names(branch)
        return names

    def allowed_names(self, schema: Any) -> frozenset[str] | None:
        """Names an object valid against ``schema`` may have, at most; None: any name."""
        if not isinstance(schema, dict):
            return None
        return self._memoised(self._allowed, schema, None, self._compute_allowed_names)

    def _compute_allowed_names(self, schema: dict[str, Any]) -> frozenset[str] | None:
        allowed = None
        listed = closed_object_names(schema)
        if listed is not None:
            # A name whose schema is false cannot be present either.
            allowed = frozenset(name for name in listed if schema["properties"][name] is not False)
        for part in self._parts(schema):
            # Each part holds: a name must be allowed by every one that closes.
            names = self.allowed_names(part)
            if names is not None:
                allowed = names if allowed is None else allowed & names
        return allowed

    def _forbids_required(self, closed: Any, other: Any) -> bool:
        """Whether ``closed`` allows no object with every name ``other`` requires."""
        allowed = self.allowed_names(closed)
        return allowed is not None and not self.required_names(other) <= allowed

    def exclusive(self, left: Any, right: Any, *, levels: int = 2) -> bool:
        """Whether no value is valid against both (a sufficient test, not an exact one).

        Up to ``levels`` down, a name both require whose schemas exclude each
        other proves it too, as a ``"meta": {"required": ["kind"], ...}`` told
        apart by its ``kind`` does; two levels reach a ``kind`` inside a
        property of branches that are themselves wrapped in an ``allOf``.
        """
        if self._comparisons_left <= 0:
            return False
        self._comparisons_left -= 1
        left_types, right_types = self.types(left), self.types(right)
        if not left_types & right_types:
            return True
        left_values, right_values = self.values(left), self.values(right)
        if left_values is not None and right_values is not None:
            return not left_values & right_values
        if self._named_values_fail(left, right) or self._named_values_fail(right, left):
            return True
        if left_types & right_types <= {"string"} and self._patterns_disjoint(left, right):
            return True
        for family, (types, *_) in enumerate(BOUND_FAMILIES):
            shared_types_bounded = left_types & right_types <= types
            if shared_types_bounded and self.interval(left, family).disjoint(
                self.interval(right, family)
            ):
                return True
        if left_types <= {"object"} or right_types <= {"object"}:
            # A closed object cannot hold a name the other side requires.
            if self._forbids_required(left, right) or self._forbids_required(right, left):
                return True
            left_props, right_props = self.required_values(left), self.required_values(right)
            for name in left_props.keys() & right_props.keys():
                if not left_props[name] & right_props[name]:
                    return True
            if levels > 0:
                return self._required_schemas_exclusive(left, right, levels - 1)
        return False

    def _named_values_fail(self, named_side: Any, other: Any) -> bool:
        """Whether each value ``named_side`` names is invalid against ``other``, as evaluated.

        ``{"const": "auto"}`` and ``{"pattern": "^[0-9]+px$"}``: no other test
        compares a named value with a pattern, a ``not`` or a length.
        """
        named = self.named(named_side)
        if named is None or len(named) > min(_MAX_DECIDED_VALUES, self._evaluations_left):
            return False
        self._evaluations_left -= len(named)
        return all(validates(value, other) is False for value in named)

    def _required_schemas_exclusive(self, left: Any, right: Any, levels: int) -> bool:
        """Whether a name both require has, on each side, a schema excluding the other's."""
        shared = sorted(self.required_names(left) & self.required_names(right))
        left_schemas, right_schemas = self.property_schemas(left), self.property_schemas(right)
        return any(
            self.exclusive(one, other, levels=levels)
            for name in shared[:MAX_COMPARED_NAMES]
            for one in left_schemas.get(name, ())
            for other in right_schemas.get(name, ())
        )

    def property_schemas(self, schema: Any) -> dict[str, tuple[Any, ...]]:
        """The schemas each listed property's value must be valid against (a few at most)."""
        if not isinstance(schema, dict):
            return {}
        return self._memoised(self._property_schemas, schema, {}, self._compute_property_schemas)

    def _compute_property_schemas(self, schema: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
        found: dict[str, tuple[Any, ...]] = {}
        properties = schema.get("properties")
        if isinstance(properties, dict):
            found = {name: (subschema,) for name, subschema in properties.items()}
        for part in self._parts(schema):
            for name, subschemas in self.property_schemas(part).items():
                found[name] = (*found.get(name, ()), *subschemas)[:_MAX_PROPERTY_SCHEMAS]
        return found

    def interval(self, schema: Any, family: int) -> Interval:
        """What the bounds of ``BOUND_FAMILIES[family]`` leave, with those of its parts."""
        if not isinstance(schema, dict):
            return EVERY_NUMBER
        return self._memoised(
            self._intervals[family],
            schema,
            EVERY_NUMBER,
            functools.partial(self._compute_interval, family=family),
        )

    def _compute_interval(self, schema: dict[str, Any], family: int) -> Interval:
        _, lower, upper, open_lower, open_upper = BOUND_FAMILIES[family]
        found = EVERY_NUMBER.tightened(schema.get(lower), False, schema.get(upper), False)
        if open_lower is not None and open_upper is not None:
            found = found.tightened(schema.get(open_lower), True, schema.get(open_upper), True)
        for part in self._parts(schema):
            bounds = self.interval(part, family)
            found = found.tightened(bounds.low, bounds.low_open, bounds.high, bounds.high_open)
        return found

    def _patterns_disjoint(self, left: Any, right: Any) -> bool:
        """Whether no string matches a pattern of each: by first characters, else by automata."""
        patterns = (self.patterns(left), self.patterns(right))
        starts = [
            [first for first in map(_first_chars, side) if first is not None] for side in patterns
        ]
        if any(a.disjoint(b) for a in starts[0] for b in starts[1]):
            return True
        return any(self._overlap(a, b) is False for a in patterns[0] for b in patterns[1])

    def _overlap(self, first: str, second: str) -> bool | None:
        key = (first, second)
        if key not in self._overlaps:
            found, work = patterns_overlap(first, second, self._overlap_work_left)
            self._overlap_work_left -= work
            self._overlaps[key] = found
        return self._overlaps[key]

    def patterns(self, schema: Any) -> tuple[str, ...]:
        """``pattern``\\ s every string valid against ``schema`` matches (a few at most)."""
        if not isinstance(schema, dict):
            return ()
        return self._memoised(self._patterns, schema, (), self._compute_patterns)

    def _compute_patterns(self, schema: dict[str, Any]) -> tuple[str, ...]:
        found = [schema["pattern"]] if isinstance(schema.get("pattern"), str) else []
        for part in self._parts(schema):
            found.extend(self.patterns(part))
        return tuple(found[:_MAX_PATTERNS])
