"""Find the JSON-Schema constraints a grammar engine would silently not enforce.

A grammar engine turns a JSON schema into a grammar, and every engine drops
some keywords on the floor: xgrammar ignores ``not``, ``uniqueItems`` and
unknown ``format`` values, treats a two-branch ``allOf`` as "any JSON", and
reads the keywords next to an ``anyOf`` as if they were not there. A client
who asked for such a constraint and did not get it would be lied to, so
:func:`analyze` walks the schema the way the engine will and returns a
:class:`Finding` for every keyword (or keyword *value*) the engine would not
enforce, with its location as a JSON pointer into the schema.

Engine-agnostic: what the engine enforces comes from an
:class:`EngineCapabilities` object (xgrammar's is
:data:`grammar_guard.core.engines.xgrammar.capabilities.XGRAMMAR`); nothing here
imports an engine. The schema is read with draft 2020-12 semantics.

The analysis is deliberately one-sided: a keyword is passed only when the
engine's grammar accepts nothing the keyword forbids. Engines also
*over*-constrain (xgrammar fixes the order of object properties, for one);
that loses valid outputs, never lets an invalid one through, and is not
reported.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from grammar_guard.core.schema.capabilities import EngineCapabilities
from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.findings import Finding
from grammar_guard.core.schema.grammar_types import GrammarTypes
from grammar_guard.core.schema.keyword_checks import (
    ANALYSED_KEYWORDS,
    NUMBER_BOUNDS,
    admits_other_properties,
    holds_wide_integer,
    multiple_of_problem,
    plainly_string_schema,
    ref_problem,
    rounded_by_float,
    string_problems,
    unwritable_range,
)
from grammar_guard.core.schema.pointers import (
    MISSING,
    join_pointer,
    resolve_pointer,
    under_embedded_resource,
)
from grammar_guard.core.schema.property_names import listed_names_pass
from grammar_guard.core.schema.regex_scan import pattern_problems
from grammar_guard.core.schema.vacuity import can_fail
from grammar_guard.core.schema.values import satisfies, type_set
from grammar_guard.core.schema.vocabulary import KEYWORD_TYPES, NUMERIC_TYPES

# What JSON writes as an escape inside a string: a name holding one is not its own text.
_ESCAPED_BY_JSON = frozenset({'"', "\\", *map(chr, range(0x20))})


def analyze(schema: Any, caps: EngineCapabilities, *, base_pointer: str = "") -> list[Finding]:
    """Every keyword of ``schema`` the engine described by ``caps`` would not enforce.

    ``schema`` is a parsed JSON document; ``base_pointer`` prefixes the
    reported locations (for a schema embedded in a larger document, such as
    a structural tag). Local ``$ref``\\ s are followed, so definitions are
    analysed where they are used and unused ones are ignored. Nothing is
    ever fetched.
    """
    return _Analysis(schema, caps, base_pointer).run()


@dataclass
class _Context:
    pointer: str  # relative to the document root
    embedded: bool = False  # inside a subschema with its own $id
    implicit_type: str | None = None  # the engine's default type (propertyNames: string)


class _Analysis:
    def __init__(self, root: Any, caps: EngineCapabilities, base_pointer: str) -> None:
        self.root = root
        self.caps = caps
        self.base = base_pointer
        self.findings: dict[tuple[str, str], Finding] = {}
        self.pending: deque[_Context] = deque()
        self.queued: set[str] = set()
        self.grammar = GrammarTypes(caps, SchemaFacts(root))

    def run(self) -> list[Finding]:
        self.queued.add("")
        self.pending.append(_Context(""))
        while self.pending:
            context = self.pending.popleft()
            target = resolve_pointer(self.root, context.pointer)
            if target is not MISSING:
                self.walk(target, context)
        return list(self.findings.values())

    # --- reporting

    def flag(self, pointer: str, keyword: str, reason: str, value: str | None = None) -> None:
        absolute = self.base + pointer
        key = (absolute, keyword if value is None else f"{keyword}: {value}")
        self.findings.setdefault(key, Finding(keyword, absolute, value, reason))

    # --- one schema object

    def walk(self, node: Any, context: _Context) -> None:
        if not isinstance(node, dict):
            return  # true/false, or not a schema (the engine reports that itself)
        ptr = context.pointer
        if "$id" in node and ptr:
            context = _Context(ptr, embedded=True, implicit_type=context.implicit_type)
        exclusive = self.grammar.exclusive_keyword(node)
        if exclusive is not None:
            self.walk_exclusive(node, exclusive, context)
        else:
            self.walk_typed(node, context)

    def walk_exclusive(self, node: dict[str, Any], keyword: str, context: _Context) -> None:
        """A schema the engine reads through one keyword only (``$ref``, ``anyOf``...)."""
        ptr = context.pointer
        if keyword in ("const", "enum"):
            values = [node["const"]] if keyword == "const" else node.get("enum")
            if holds_wide_integer(values):
                self.flag(
                    join_pointer(ptr, keyword),
                    keyword,
                    "an integer beyond 64 bits is read as a float, so a different number "
                    "is accepted",
                )
            self.flag_siblings_of_values(node, keyword, values, ptr)
            return
        for key, value in node.items():
            if key == keyword or not can_fail(key, value, node):
                continue
            if key == "type" and self.grammar.dispatch_types(node, keyword) <= type_set(value):
                continue  # every branch already has one of these types
            self.flag(
                join_pointer(ptr, key),
                key,
                f"ignored: the engine reads only '{keyword}' in this schema",
            )
        if keyword == "$ref":
            self.follow_ref(node["$ref"], join_pointer(ptr, "$ref"), context)
        elif keyword in ("anyOf", "oneOf", "allOf"):
            branches = node[keyword]
            if not isinstance(branches, list):
                return
            limit = self.caps.max_all_of_branches
            if keyword == "allOf" and limit is not None and len(branches) > limit:
                self.flag(
                    join_pointer(ptr, "allOf"),
                    "allOf",
                    f"allOf with {len(branches)} branches is not enforced "
                    "(the engine accepts any JSON value)",
                )
                return
            if (
                keyword == "oneOf"
                and self.caps.one_of_needs_disjoint_branches
                and not self.grammar.one_of_exclusive(branches)
            ):
                self.flag(
                    join_pointer(ptr, "oneOf"),
                    "oneOf",
                    "oneOf is enforced as anyOf: its branches are not provably exclusive, "
                    "so a value matching several of them is accepted",
                )
            for index, branch in enumerate(branches):
                self.walk(branch, _child(context, keyword, index))

    def flag_siblings_of_values(
        self, node: dict[str, Any], keyword: str, values: Any, ptr: str
    ) -> None:
        """Siblings of const/enum are ignored, which is harmless when every value satisfies them."""
        for key, value in node.items():
            if key == keyword or not can_fail(key, value, node):
                continue
            verdicts = (
                [satisfies(v, key, value) for v in values] if isinstance(values, list) else [None]
            )
            if all(verdict is True for verdict in verdicts):
                continue
            self.flag(
                join_pointer(ptr, key),
                key,
                f"ignored: the engine reads only '{keyword}' in this schema, "
                f"and not every allowed value satisfies '{key}'",
            )

    def follow_ref(self, ref: Any, ref_pointer: str, context: _Context) -> None:
        if not isinstance(ref, str):
            return  # not a schema; the engine refuses it
        problem = ref_problem(ref, context.embedded, self.caps)
        if problem is not None:
            self.flag(ref_pointer, "$ref", problem, value=ref)
            return
        if ref != "#" and not ref.startswith("#/"):
            return  # resolved by the engine, but not into this document
        pointer = ref[1:]
        if pointer in self.queued:
            return
        self.queued.add(pointer)
        target_embedded = under_embedded_resource(self.root, pointer)
        self.pending.append(_Context(pointer, embedded=target_embedded))

    # --- a schema read by its type

    def walk_typed(self, node: dict[str, Any], context: _Context) -> None:
        ptr = context.pointer
        produced = self.grammar.produced_types(node, context.implicit_type)
        if produced is None:
            for key, value in node.items():
                if key != "type" and can_fail(key, value, node):
                    self.flag(
                        join_pointer(ptr, key),
                        key,
                        "ignored: the schema has no 'type', so the engine accepts any JSON "
                        "value here",
                        value=_value_label(key, value),
                    )
            return
        numeric = produced & NUMERIC_TYPES
        for key, value in node.items():
            if key == "type" or not can_fail(key, value, node):
                continue
            applies_to = KEYWORD_TYPES.get(key)
            if applies_to is not None and not applies_to & produced:
                continue  # the engine produces no instance this keyword could constrain
            if key in self.caps.unenforced or key not in ANALYSED_KEYWORDS:
                self.flag(
                    join_pointer(ptr, key),
                    key,
                    "not enforced by the engine",
                    value=_value_label(key, value),
                )
            elif key == "multipleOf" and numeric:
                reason = multiple_of_problem(node, produced, self.caps.multiple_of)
                if reason is not None:
                    self.flag(join_pointer(ptr, key), key, reason)
            elif key in NUMBER_BOUNDS and "number" in produced and rounded_by_float(value):
                self.flag(
                    join_pointer(ptr, key),
                    key,
                    "a bound a 64-bit float cannot hold exactly is rounded (possibly outward)",
                )
        digits = self.caps.number_fraction_digits
        if "number" in produced and digits is not None:
            bound = unwritable_range(node, digits)
            if bound is not None:
                self.flag(
                    join_pointer(ptr, bound),
                    bound,
                    f"no number with at most {digits} decimals lies in this range, and the "
                    "engine writes it as an empty value, which is not JSON",
                )
        if "string" in produced:
            for key, reason, label in string_problems(node, self.caps):
                self.flag(join_pointer(ptr, key), key, reason, value=label)
        if "array" in produced:
            self.walk_array(node, context)
        if "object" in produced:
            self.walk_object(node, context)

    def walk_array(self, node: dict[str, Any], context: _Context) -> None:
        prefix = node.get("prefixItems")
        if isinstance(prefix, list):
            for index, item in enumerate(prefix):
                self.walk(item, _child(context, "prefixItems", index))
        if "items" in node:
            self.walk(node["items"], _child(context, "items"))
        elif "unevaluatedItems" in node:
            # Without "items" and without applicators (the engine would have
            # read those instead), unevaluatedItems means what items means.
            self.walk(node["unevaluatedItems"], _child(context, "unevaluatedItems"))

    def walk_object(self, node: dict[str, Any], context: _Context) -> None:
        caps = self.caps
        ptr = context.pointer
        properties = node.get("properties")
        names = set(properties) if isinstance(properties, dict) else set()
        if isinstance(properties, dict):
            others_allowed = admits_other_properties(node)
            for name, subschema in properties.items():
                if (
                    others_allowed
                    and not caps.non_ascii_names_with_additional
                    and not _written_as_is(name)
                ):
                    self.flag(
                        join_pointer(ptr, "properties", name),
                        "properties",
                        "a property whose name is not ASCII, or holds a character JSON escapes, "
                        "is also accepted as an additional property, with the additional "
                        "properties' schema",
                        value=name,
                    )
                self.walk(subschema, _child(context, "properties", name))
        required = node.get("required")
        if isinstance(required, list):
            for index, name in enumerate(required):
                if not isinstance(name, str):
                    continue
                if not caps.required:
                    reason = "required properties are not enforced here"
                elif name not in names and not caps.required_outside_properties:
                    reason = "a required name missing from 'properties' is not enforced"
                else:
                    continue
                self.flag(join_pointer(ptr, "required", index), "required", reason, value=name)
        patterns = node.get("patternProperties")
        has_patterns = isinstance(patterns, dict) and bool(patterns)
        if has_patterns:
            assert isinstance(patterns, dict)
            where = join_pointer(ptr, "patternProperties")
            if names and not caps.pattern_properties_with_properties:
                self.flag(
                    where,
                    "patternProperties",
                    "not enforced next to 'properties' (a listed or additional property "
                    "that matches a pattern is not checked against it)",
                )
            limit = caps.max_pattern_properties
            if limit is not None and len(patterns) > limit:
                self.flag(
                    where,
                    "patternProperties",
                    f"more than {limit} pattern is not enforced (a name matching several "
                    "patterns is checked against one of them only)",
                )
            for key, subschema in patterns.items():
                problems = pattern_problems(key, caps.pattern)
                if problems:
                    self.flag(join_pointer(where, key), "patternProperties", "; ".join(problems))
                self.walk(subschema, _child(context, "patternProperties", key))
        if "propertyNames" in node and node["propertyNames"] is not True:
            self.check_property_names(node, names, has_patterns, context)
        additional = node.get("additionalProperties")
        if isinstance(additional, dict):
            self.walk(additional, _child(context, "additionalProperties"))
        elif "additionalProperties" not in node and isinstance(
            node.get("unevaluatedProperties"), dict
        ):
            # As for items: with nothing else evaluating properties it is
            # additionalProperties by another name.
            self.walk(node["unevaluatedProperties"], _child(context, "unevaluatedProperties"))

    def check_property_names(
        self, node: dict[str, Any], names: set[str], has_patterns: bool, context: _Context
    ) -> None:
        caps = self.caps
        ptr = context.pointer
        where = join_pointer(ptr, "propertyNames")
        subschema = node["propertyNames"]
        if names and not caps.property_names_with_properties and not listed_names_pass(node):
            self.flag(where, "propertyNames", "not checked against the names in 'properties'")
        if has_patterns and not caps.property_names_with_pattern_properties:
            self.flag(where, "propertyNames", "ignored next to 'patternProperties'")
        if not names and not has_patterns and not caps.property_names_with_no_additional:
            for key in ("additionalProperties", "unevaluatedProperties"):
                if node.get(key) is False:
                    self.flag(
                        join_pointer(ptr, key),
                        key,
                        "ignored next to 'propertyNames' (other names are accepted)",
                    )
        if not caps.property_names_any_schema and not plainly_string_schema(subschema):
            self.flag(
                where,
                "propertyNames",
                "only a schema that is itself a string schema (type string, pattern, lengths, "
                "format, const or enum of strings) is enforced; this one lets the engine write "
                "keys that are not strings",
            )
            return
        self.walk(subschema, _Context(where, context.embedded, implicit_type="string"))


def _child(context: _Context, *keys: str | int) -> _Context:
    return _Context(join_pointer(context.pointer, *keys), context.embedded)


def _value_label(key: str, value: Any) -> str | None:
    return value if key == "format" and isinstance(value, str) else None


def _written_as_is(name: str) -> bool:
    """Whether JSON writes ``name`` byte for byte as it is: ASCII, no quote, backslash or control.

    xgrammar keeps listed names out of the additional properties by their
    text, byte by byte, which misses a name with a character of several
    bytes ("ü") or one JSON writes as an escape ("a\\nb"): such a name gets
    through as an additional property, with the additional properties'
    schema (measured on xgrammar 0.2.8).
    """
    return name.isascii() and not any(char in _ESCAPED_BY_JSON for char in name)
