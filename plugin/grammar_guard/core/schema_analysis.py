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
:data:`grammar_guard.core.xgrammar_capabilities.XGRAMMAR`); nothing here
imports an engine. The schema is read with draft 2020-12 semantics.

The analysis is deliberately one-sided: a keyword is passed only when the
engine's grammar accepts nothing the keyword forbids. Engines also
*over*-constrain (xgrammar fixes the order of object properties, for one);
that loses valid outputs, never lets an invalid one through, and is not
reported.
"""

from __future__ import annotations

import decimal
import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# --- the draft 2020-12 vocabulary -------------------------------------------------

JSON_TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})

# Keywords that impose nothing on an instance (meta-data and content
# vocabularies; in 2020-12 the content keywords are annotations only).
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)
# Keys that name or hold schemas without constraining the instance themselves.
# ``definitions`` is the pre-2019 spelling of ``$defs`` that many schemas use.
STRUCTURAL = frozenset(
    {"$schema", "$id", "$anchor", "$dynamicAnchor", "$vocabulary", "$defs", "definitions"}
)
APPLICATORS = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "prefixItems",
        "items",
        "contains",
        "properties",
        "patternProperties",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
VALIDATION = frozenset(
    {
        "type",
        "enum",
        "const",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
        "maxLength",
        "minLength",
        "pattern",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxContains",
        "minContains",
        "maxProperties",
        "minProperties",
        "required",
        "dependentRequired",
        "format",
    }
)
# Keywords of earlier drafts that 2020-12 replaced; a client writing them
# means a constraint, so they are analysed (and, unless empty, reported).
LEGACY_KEYWORDS = frozenset({"dependencies", "additionalItems"})
KNOWN_KEYWORDS = ANNOTATIONS | STRUCTURAL | APPLICATORS | VALIDATION | LEGACY_KEYWORDS

_NUMERIC = frozenset({"number", "integer"})
# The instance types a keyword constrains; a keyword not listed constrains every type.
KEYWORD_TYPES: Mapping[str, frozenset[str]] = {
    **dict.fromkeys(
        ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), _NUMERIC
    ),
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), frozenset({"string"})),
    **dict.fromkeys(
        (
            "items",
            "prefixItems",
            "contains",
            "minContains",
            "maxContains",
            "minItems",
            "maxItems",
            "uniqueItems",
            "unevaluatedItems",
            "additionalItems",
        ),
        frozenset({"array"}),
    ),
    **dict.fromkeys(
        (
            "properties",
            "patternProperties",
            "additionalProperties",
            "propertyNames",
            "required",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "dependentSchemas",
            "unevaluatedProperties",
            "dependencies",
        ),
        frozenset({"object"}),
    ),
}


# Keywords the analysis reasons about one by one when a schema is read by its
# type; any other constraining keyword there is reported as not enforced.
_ANALYSED = frozenset(
    {
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "prefixItems",
        "unevaluatedItems",
        "minItems",
        "maxItems",
        "minContains",  # reported on "contains"
        "maxContains",
        "properties",
        "required",
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
    }
)

# --- what an engine enforces ------------------------------------------------------


@dataclass(frozen=True)
class MultipleOfSupport:
    """How far an engine enforces ``multipleOf``."""

    number: bool = False  # on "type": "number"
    integer: bool = True  # on "type": "integer", within the limits below
    integer_max_divisor: int | None = None  # larger divisors are ignored
    # With bounds: enforced only when both sides are bounded and the range
    # holds at most this many integers; None: any bounds are fine.
    integer_max_range: int | None = None


@dataclass(frozen=True)
class PatternSupport:
    """Regex features an engine's ``pattern`` (and ``patternProperties``) honours.

    Patterns are ECMA-262 regexes matched anywhere in the string; an engine
    that matches the whole string only over-constrains, which is fine.
    """

    lookaround: bool = False
    # ``^``/``$`` anywhere but the start/end of the whole match (``a^b`` can
    # never match; an engine that treats the anchor as empty accepts "ab").
    inner_anchors: bool = False
    # ECMA-262 ``\\s`` includes Unicode spaces (NBSP, U+2028, BOM...); an
    # engine whose ``\\s`` is ASCII-only lets them through ``\\S`` and ``[^\\s]``.
    unicode_whitespace: bool = False
    # Whether a pattern may match characters JSON must escape (quote,
    # backslash, U+0000-U+001F) without the engine writing them raw.
    escapes_json_specials: bool = False


@dataclass(frozen=True)
class EngineCapabilities:
    """What one grammar engine enforces of draft 2020-12, as data the analysis reads.

    Each field describes one class of behaviour; :func:`analyze` interprets
    them. A second engine supplies its own instance.
    """

    engine: str
    # Formats compiled to an exact grammar; any other value is a finding.
    exact_formats: frozenset[str] = frozenset()
    # Formats the engine replaces by its own regex, which then shadows
    # ``pattern``, ``minLength`` and ``maxLength`` next to them.
    formats_shadowing_string_keywords: frozenset[str] = frozenset()
    pattern_shadows_lengths: bool = False
    string_lengths: bool = True  # minLength/maxLength enforced at all
    pattern: PatternSupport = field(default_factory=PatternSupport)
    multiple_of: MultipleOfSupport = field(default_factory=MultipleOfSupport)
    # Keywords never enforced: any value that constrains is a finding.
    unenforced: frozenset[str] = frozenset()
    # If one of these is present the engine uses only the first (in this
    # order) and ignores every sibling keyword. Empty: siblings are combined.
    exclusive_keywords: tuple[str, ...] = ()
    # Without "type", these keywords make the engine produce that type only;
    # a schema with none of them (and no "type") becomes "any JSON value" and
    # every type-specific keyword in it is dropped. None: the engine handles
    # typeless schemas per JSON Schema.
    implied_types: tuple[tuple[str, str], ...] | None = None
    max_all_of_branches: int | None = None  # None: allOf of any length is enforced
    # oneOf enforced only when its branches are provably mutually exclusive
    # (the engine treats it as anyOf otherwise).
    one_of_needs_disjoint_branches: bool = False
    required_outside_properties: bool = True  # names not in "properties"
    required: bool = True  # presence of required properties at all
    max_pattern_properties: int | None = None
    pattern_properties_with_properties: bool = True
    property_names_with_properties: bool = True
    property_names_with_pattern_properties: bool = True
    # additionalProperties/unevaluatedProperties false next to propertyNames.
    property_names_with_no_additional: bool = True
    # Whether ``propertyNames`` that does not itself say "string" (``{}``,
    # ``anyOf``...) still yields string keys.
    property_names_any_schema: bool = True
    # $ref forms: JSON pointers into the same document are always supported;
    # anchors, other documents and pointers needing unescaping may not be.
    ref_anchors: bool = False
    ref_remote: bool = False
    ref_pointer_escapes: bool = False
    # Relative references inside a subschema with its own "$id".
    embedded_resources: bool = False
    # Objects admit only the listed properties unless additionalProperties,
    # unevaluatedProperties, patternProperties or propertyNames let more in
    # (xgrammar's strict mode). Used to prove oneOf branches exclusive.
    closed_objects: bool = False
    # Whether a listed property whose name is not ASCII is kept out of the
    # additionalProperties path (xgrammar excludes listed names byte by byte,
    # which lets "ü" through as an additional property).
    non_ascii_names_with_additional: bool = True


# --- findings ---------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One keyword (or keyword value) the engine would not enforce.

    ``keyword`` is the schema keyword as written, ``value`` narrows it where
    the value decides (``format: email``, ``required: id``), ``pointer`` is
    the JSON pointer of the keyword in the document the client sent.
    """

    keyword: str
    pointer: str
    value: str | None = None
    reason: str = ""

    @property
    def label(self) -> str:
        return self.keyword if self.value is None else f"{self.keyword}: {self.value}"

    @property
    def metric_keyword(self) -> str:
        """A bounded label for metrics: the keyword, or ``unknown`` should one slip through.

        Client text must never become a label: it would grow the metric
        without bound.
        """
        return self.keyword if self.keyword in KNOWN_KEYWORDS else "unknown"

    def describe(self) -> str:
        return f"'{self.label}' at {self.pointer or '/'}"


def pointer_token(key: str | int) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def join_pointer(base: str, *keys: str | int) -> str:
    return base + "".join("/" + pointer_token(key) for key in keys)


# Where a schema holds subschemas: maps of them, lists of them, or one.
SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
SCHEMA_LISTS = frozenset({"prefixItems", "anyOf", "oneOf", "allOf"})
SCHEMA_VALUES = frozenset(
    {
        "additionalProperties",
        "unevaluatedProperties",
        "items",
        "additionalItems",
        "unevaluatedItems",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
    }
)


def subschemas(node: Mapping[str, Any], pointer: str) -> Iterator[tuple[Any, str]]:
    """The subschemas directly under ``node``, each with its JSON pointer."""
    for keyword, value in node.items():
        if keyword in SCHEMA_MAPS and isinstance(value, dict):
            for name, item in value.items():
                yield item, join_pointer(pointer, keyword, name)
        elif keyword in SCHEMA_LISTS and isinstance(value, list):
            for index, item in enumerate(value):
                yield item, join_pointer(pointer, keyword, index)
        elif keyword in SCHEMA_VALUES:
            yield value, join_pointer(pointer, keyword)


# --- the analysis -----------------------------------------------------------------


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
        self.facts = SchemaFacts(root)
        self._grammar_types: dict[int, frozenset[str]] = {}
        self._grammar_depth = 0

    def run(self) -> list[Finding]:
        self.queued.add("")
        self.pending.append(_Context(""))
        while self.pending:
            context = self.pending.popleft()
            target = resolve_pointer(self.root, context.pointer)
            if target is not _MISSING:
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
        exclusive = next((k for k in self.caps.exclusive_keywords if k in node), None)
        if exclusive is not None:
            self.walk_exclusive(node, exclusive, context)
        else:
            self.walk_typed(node, context)

    def walk_exclusive(self, node: dict[str, Any], keyword: str, context: _Context) -> None:
        """A schema the engine reads through one keyword only (``$ref``, ``anyOf``...)."""
        ptr = context.pointer
        if keyword in ("const", "enum"):
            values = [node["const"]] if keyword == "const" else node.get("enum")
            if _holds_wide_integer(values):
                self.flag(
                    join_pointer(ptr, keyword),
                    keyword,
                    "an integer beyond 64 bits is read as a float, so a different number "
                    "is accepted",
                )
            self.flag_siblings_of_values(node, keyword, values, ptr)
            return
        for key, value in node.items():
            if key == keyword or not _constrains(key) or _vacuous(key, value, node):
                continue
            if key == "type" and self.dispatch_types(node, keyword) <= type_set(value):
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
                and not self.one_of_exclusive(branches)
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
            if key == keyword or not _constrains(key) or _vacuous(key, value, node):
                continue
            verdicts = (
                [satisfies(v, key, value, node) for v in values]
                if isinstance(values, list)
                else [None]
            )
            if all(verdict is True for verdict in verdicts):
                continue
            self.flag(
                join_pointer(ptr, key),
                key,
                f"ignored: the engine reads only '{keyword}' in this schema, "
                f"and not every allowed value satisfies '{key}'",
            )

    def one_of_exclusive(self, branches: Sequence[Any]) -> bool:
        """Whether no value the engine accepts through one branch is valid for another.

        Then oneOf read as anyOf is oneOf. Either no value is valid for two
        branches at all, or what the engine's grammar for a branch produces
        cannot satisfy another (a closed object lacking a required key).
        """
        facts = self.facts
        if len(branches) > facts.MAX_ONE_OF_BRANCHES:
            return False
        shapes = [self.grammar_shape(branch) for branch in branches]
        for i, left in enumerate(branches):
            for j in range(i + 1, len(branches)):
                right = branches[j]
                if facts.exclusive(left, right):
                    continue
                if not (
                    self.produces_only_invalid(shapes[i], right)
                    and self.produces_only_invalid(shapes[j], left)
                ):
                    return False
        return True

    def grammar_shape(self, branch: Any) -> tuple[frozenset[str], frozenset[str] | None]:
        """The types the engine's grammar for ``branch`` produces, and, for closed
        objects, the only keys it can write (None: any)."""
        node = branch
        for _ in range(32):  # through a chain of $refs, as the engine reads them
            exclusive = (
                next((k for k in self.caps.exclusive_keywords if k in node), None)
                if isinstance(node, dict)
                else None
            )
            if exclusive != "$ref":
                break
            target = self.facts.target(node)
            if target is _MISSING:
                return _ALL_TYPES, None
            node = target
        if not isinstance(node, dict) or exclusive is not None:
            return self.facts.types(node), None
        produced = self.produced_types(node, _Context(""))
        types = (produced if produced is not None else _ALL_TYPES) & self.facts.types(node)
        closed = (
            self.caps.closed_objects
            and node.get("additionalProperties", False) is False
            and node.get("unevaluatedProperties", False) is False
            and not node.get("patternProperties")
            and "propertyNames" not in node
        )
        properties = node.get("properties", {})
        keys = frozenset(properties) if closed and isinstance(properties, dict) else None
        return types, keys

    def produces_only_invalid(
        self, shape: tuple[frozenset[str], frozenset[str] | None], other: Any
    ) -> bool:
        types, keys = shape
        if not types & self.facts.types(other):
            return True
        if types <= {"object"} and keys is not None:
            return bool(self.facts.required_names(other) - keys)
        return False

    def dispatch_types(self, node: dict[str, Any], keyword: str) -> frozenset[str]:
        """The types the engine's grammar for the keyword it reads can produce (at most)."""
        if keyword == "$ref":
            target = self.facts.target(node)
            return self.grammar_types(target) if target is not _MISSING else _ALL_TYPES
        branches = node.get(keyword)
        if not isinstance(branches, list) or not branches:
            return _ALL_TYPES
        sets = [self.grammar_types(branch) for branch in branches]
        if keyword == "allOf":
            return sets[0] if len(sets) == 1 else _ALL_TYPES
        return frozenset().union(*sets)

    def grammar_types(self, node: Any) -> frozenset[str]:
        """The types the engine's grammar for ``node`` produces (an upper bound).

        Not what ``node`` validates: xgrammar reads ``{"properties": ...}`` as
        objects only. Sound for keywords next to a branch, since the branch's
        own keywords are analysed where it is walked.
        """
        if node is False:
            return frozenset()
        if not isinstance(node, dict):
            return _ALL_TYPES
        key = id(node)
        if key in self._grammar_types:
            return self._grammar_types[key]
        if self._grammar_depth >= SchemaFacts.MAX_DEPTH:
            return _ALL_TYPES
        self._grammar_types[key] = _ALL_TYPES  # a cycle gives no information
        self._grammar_depth += 1
        try:
            exclusive = next((k for k in self.caps.exclusive_keywords if k in node), None)
            if exclusive in ("const", "enum"):
                types = self.facts.types({exclusive: node[exclusive]})
            elif exclusive is not None:
                types = self.dispatch_types(node, exclusive)
            else:
                produced = self.produced_types(node, _Context(""))
                types = _ALL_TYPES if produced is None else produced
        finally:
            self._grammar_depth -= 1
        self._grammar_types[key] = types
        return types

    def follow_ref(self, ref: Any, ref_pointer: str, context: _Context) -> None:
        caps = self.caps
        if not isinstance(ref, str):
            return  # not a schema; the engine refuses it
        if context.embedded and not caps.embedded_resources:
            self.flag(
                ref_pointer,
                "$ref",
                "inside a subschema with its own $id the engine resolves it against "
                "the document root, not that subschema",
                value=ref,
            )
            return
        if ref != "#" and not ref.startswith("#/"):
            if ref.startswith("#"):
                supported, what = caps.ref_anchors, "a reference to an anchor"
            else:
                supported, what = caps.ref_remote, "a reference to another document"
            if not supported:
                self.flag(
                    ref_pointer,
                    "$ref",
                    f"{what} is not resolved (the engine accepts any JSON value there); "
                    "grammar-guard never fetches schemas",
                    value=ref,
                )
            return
        tokens = ref[2:].split("/") if ref != "#" else []
        if not caps.ref_pointer_escapes and any(t == "" or "~" in t or "%" in t for t in tokens):
            self.flag(
                ref_pointer,
                "$ref",
                "a JSON pointer with escapes or empty segments is not resolved correctly",
                value=ref,
            )
            return
        pointer = ref[1:]
        if pointer in self.queued:
            return
        self.queued.add(pointer)
        target_embedded = _under_embedded_resource(self.root, pointer)
        self.pending.append(_Context(pointer, embedded=target_embedded))

    # --- a schema read by its type

    def walk_typed(self, node: dict[str, Any], context: _Context) -> None:
        ptr = context.pointer
        produced = self.produced_types(node, context)
        if produced is None:
            for key, value in node.items():
                if _constrains(key) and key != "type" and not _vacuous(key, value, node):
                    self.flag(
                        join_pointer(ptr, key),
                        key,
                        "ignored: the schema has no 'type', so the engine accepts any JSON "
                        "value here",
                        value=_value_label(key, value),
                    )
            return
        numeric = produced & _NUMERIC
        for key, value in node.items():
            if not _constrains(key) or key == "type" or _vacuous(key, value, node):
                continue
            applies_to = KEYWORD_TYPES.get(key)
            if applies_to is not None and not applies_to & produced:
                continue  # the engine produces no instance this keyword could constrain
            if key in self.caps.unenforced or key not in _ANALYSED:
                self.flag(
                    join_pointer(ptr, key),
                    key,
                    "not enforced by the engine",
                    value=_value_label(key, value),
                )
            elif key == "multipleOf" and numeric:
                self.check_multiple_of(node, produced, ptr)
            elif key in _BOUNDS and "number" in produced and _rounded_by_float(value):
                self.flag(
                    join_pointer(ptr, key),
                    key,
                    "a bound a 64-bit float cannot hold exactly is rounded (possibly outward)",
                )
        if "string" in produced:
            self.check_string(node, ptr)
        if "array" in produced:
            self.walk_array(node, context)
        if "object" in produced:
            self.walk_object(node, context)

    def produced_types(self, node: dict[str, Any], context: _Context) -> frozenset[str] | None:
        """The types the engine's grammar produces here; None: any JSON value, keywords dropped."""
        declared = node.get("type")
        if isinstance(declared, str) and declared in JSON_TYPES:
            return _expand_number(frozenset({declared}))
        if isinstance(declared, list) and declared:
            return _expand_number(frozenset(t for t in declared if isinstance(t, str)))
        if context.implicit_type is not None:
            return frozenset({context.implicit_type})
        if self.caps.implied_types is None:
            return _ALL_TYPES
        for keyword, implied in self.caps.implied_types:
            if keyword in node:
                return frozenset({implied})
        return None

    def check_multiple_of(self, node: dict[str, Any], produced: frozenset[str], ptr: str) -> None:
        support = self.caps.multiple_of
        divisor = node["multipleOf"]
        if not _is_number(divisor) or divisor <= 0:
            return  # invalid schema; the engine refuses it
        reason = None
        if "number" in produced and not support.number:
            reason = "multipleOf is not enforced on type number"
        elif "integer" in produced:
            if divisor == 1:
                return
            if not support.integer:
                reason = "multipleOf is not enforced on type integer"
            elif isinstance(divisor, float) and not divisor.is_integer():
                reason = "a fractional multipleOf is not enforced on type integer"
            elif support.integer_max_divisor is not None and divisor > support.integer_max_divisor:
                reason = f"multipleOf above {support.integer_max_divisor} is not enforced"
            elif support.integer_max_range is not None:
                low, high = _integer_range(node)
                if (low is None) != (high is None):
                    reason = "multipleOf with a bound on one side only is not enforced"
                elif (
                    low is not None
                    and high is not None
                    and high - low + 1 > support.integer_max_range
                ):
                    reason = (
                        "multipleOf over a range of more than "
                        f"{support.integer_max_range} integers is not enforced"
                    )
        if reason is not None:
            self.flag(join_pointer(ptr, "multipleOf"), "multipleOf", reason)

    def check_string(self, node: dict[str, Any], ptr: str) -> None:
        caps = self.caps
        shadowed: dict[str, str] = {}
        fmt = node.get("format")
        if "format" in node:
            if not (isinstance(fmt, str) and fmt in caps.exact_formats):
                self.flag(
                    join_pointer(ptr, "format"),
                    "format",
                    "this format is not enforced exactly by the engine",
                    value=str(fmt),
                )
            if isinstance(fmt, str) and fmt in caps.formats_shadowing_string_keywords:
                shadowed.update(
                    dict.fromkeys(("pattern", "minLength", "maxLength"), f"format '{fmt}'")
                )
        if "pattern" in node and "pattern" not in shadowed:
            pattern = node["pattern"]
            problems = pattern_problems(pattern, caps.pattern) if isinstance(pattern, str) else []
            if problems:
                self.flag(join_pointer(ptr, "pattern"), "pattern", "; ".join(problems))
            if caps.pattern_shadows_lengths:
                shadowed.update(dict.fromkeys(("minLength", "maxLength"), "pattern"))
        for key in ("pattern", "minLength", "maxLength"):
            if key not in node or _vacuous(key, node[key], node):
                continue
            if key in shadowed:
                self.flag(
                    join_pointer(ptr, key),
                    key,
                    f"ignored next to {shadowed[key]}",
                )
            elif key != "pattern" and not caps.string_lengths:
                self.flag(join_pointer(ptr, key), key, "not enforced here")

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
            others_allowed = _admits_other_properties(node)
            for name, subschema in properties.items():
                if (
                    others_allowed
                    and not caps.non_ascii_names_with_additional
                    and not name.isascii()
                ):
                    self.flag(
                        join_pointer(ptr, "properties", name),
                        "properties",
                        "a property whose name is not ASCII is also accepted as an additional "
                        "property, with the additional properties' schema",
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
        if names and not caps.property_names_with_properties:
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
        if not caps.property_names_any_schema and not _plainly_string_schema(subschema):
            self.flag(
                where,
                "propertyNames",
                "only a schema that is itself a string schema (type string, pattern, lengths, "
                "format, const or enum of strings) is enforced; this one lets the engine write "
                "keys that are not strings",
            )
            return
        self.walk(subschema, _Context(where, context.embedded, implicit_type="string"))


# --- helpers over schemas -----------------------------------------------------------


class _Missing:
    pass


_MISSING: Any = _Missing()
_ALL_TYPES = frozenset(JSON_TYPES)


_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_INT64 = range(-(2**63), 2**63)


def _rounded_by_float(value: Any) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        return False  # floats came from JSON as doubles and go back exactly
    try:
        return float(value) != value
    except OverflowError:
        return True


def _holds_wide_integer(value: Any) -> bool:
    """Whether a JSON value holds an integer outside the 64-bit range (at any depth)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and item not in _INT64:
            return True
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
    return False


def _admits_other_properties(node: Mapping[str, Any]) -> bool:
    """Whether an object schema lets in properties it does not list (beyond patterns)."""
    if "additionalProperties" in node:
        return node["additionalProperties"] is not False
    return "unevaluatedProperties" in node and node["unevaluatedProperties"] is not False


def _child(context: _Context, *keys: str | int) -> _Context:
    return _Context(join_pointer(context.pointer, *keys), context.embedded)


def _constrains(key: str) -> bool:
    return key in KNOWN_KEYWORDS and key not in ANNOTATIONS and key not in STRUCTURAL


def _value_label(key: str, value: Any) -> str | None:
    return value if key == "format" and isinstance(value, str) else None


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer ("" is the whole document), or a sentinel if absent."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        return _MISSING
    node = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return _MISSING
    return node


def _under_embedded_resource(document: Any, pointer: str) -> bool:
    """Whether some schema on the path to ``pointer`` (not the root) has its own ``$id``."""
    if not pointer:
        return False
    node = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
        if isinstance(node, dict) and "$id" in node:
            return True
    return False


def _vacuous_schema(value: Any, *, allow_empty: bool = True) -> bool:
    """Whether a schema accepts every value: ``true``, or (if ``allow_empty``) an object
    schema whose every keyword is an annotation or can never fail."""
    if value is True:
        return True
    if not allow_empty or not isinstance(value, dict):
        return False
    return all(not _constrains(key) or _vacuous(key, item, value) for key, item in value.items())


def _unsatisfiable(value: Any) -> bool:
    """Whether a schema accepts no value at all (a sufficient test)."""
    if value is False:
        return True
    return isinstance(value, dict) and "not" in value and _vacuous_schema(value["not"])


def _vacuous(key: str, value: Any, node: Mapping[str, Any]) -> bool:
    """Whether ``key: value`` can never make an instance invalid (JSON Schema semantics)."""
    if key in ("minLength", "minItems", "minProperties", "minContains") and value == 0:
        return True
    if key == "uniqueItems":
        return value is False
    if key == "required" and value == []:
        return True
    if key in ("properties", "patternProperties", "dependentSchemas"):
        return isinstance(value, dict) and all(_vacuous_schema(v) for v in value.values())
    if key == "dependentRequired":
        return isinstance(value, dict) and all(v == [] for v in value.values())
    if key in LEGACY_KEYWORDS:
        if key == "dependencies":
            return isinstance(value, dict) and all(
                v == [] or _vacuous_schema(v) for v in value.values()
            )
        return key == "additionalItems" and _vacuous_schema(value)
    if key in (
        "additionalProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "items",
        "propertyNames",
    ):
        return _vacuous_schema(value)
    if key == "not":
        return _unsatisfiable(value)
    if key == "if":
        return "then" not in node and "else" not in node
    if key in ("then", "else"):
        return "if" not in node
    if key in ("minContains", "maxContains"):
        return "contains" not in node
    if key == "contains":
        return node.get("minContains") == 0 and "maxContains" not in node
    if key == "anyOf":
        return isinstance(value, list) and any(_vacuous_schema(v) for v in value)
    if key == "allOf":
        return isinstance(value, list) and bool(value) and all(_vacuous_schema(v) for v in value)
    return False


def _plainly_string_schema(value: Any) -> bool:
    """A propertyNames schema the engine builds as string keys, whatever it is cached as."""
    if not isinstance(value, dict):
        return False
    if "$ref" in value or "anyOf" in value or "oneOf" in value or "allOf" in value:
        return False
    if "const" in value:
        return isinstance(value["const"], str)
    if "enum" in value:
        return isinstance(value["enum"], list) and all(isinstance(v, str) for v in value["enum"])
    declared = value.get("type")
    if declared == "string":
        return True
    if declared is not None:
        return False
    return any(key in value for key in ("pattern", "minLength", "maxLength", "format"))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer_range(node: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive integer range the bounds of an integer schema leave (None: unbounded)."""
    lows, highs = [], []
    for key, side, strict in (
        ("minimum", lows, False),
        ("exclusiveMinimum", lows, True),
        ("maximum", highs, False),
        ("exclusiveMaximum", highs, True),
    ):
        value = node.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if not _is_number(value):
            continue
        if side is lows:
            side.append(math.floor(value) + 1 if strict else math.ceil(value))
        else:
            side.append(math.ceil(value) - 1 if strict else math.floor(value))
    return (max(lows) if lows else None, min(highs) if highs else None)


def type_set(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return _expand_number(frozenset({value}))
    if isinstance(value, list):
        return _expand_number(frozenset(v for v in value if isinstance(v, str)))
    return frozenset()


def _expand_number(types: frozenset[str]) -> frozenset[str]:
    # "number" includes the integers; an integer-typed value is a number too.
    return types | {"integer"} if "number" in types else types


def json_type(value: Any) -> str:
    """The JSON Schema type of a value (1.0 is an integer, as 2020-12 says)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def json_equal(left: Any, right: Any) -> bool:
    """JSON Schema equality: numbers by value, objects regardless of key order."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and left == right


def _as_decimal(value: float | int) -> decimal.Decimal:
    return decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)


def satisfies(value: Any, keyword: str, argument: Any, node: Mapping[str, Any]) -> bool | None:
    """Whether ``value`` satisfies ``keyword: argument``; None where this cannot tell."""
    applies_to = KEYWORD_TYPES.get(keyword)
    kind = json_type(value)
    if applies_to is not None and not ({kind, "number"} if kind == "integer" else {kind}) & (
        applies_to | ({"number"} if "integer" in applies_to else set())
    ):
        return True  # the keyword does not constrain values of this type
    try:
        if keyword == "type":
            allowed = type_set(argument)
            return kind in allowed or (kind == "integer" and "number" in allowed)
        if keyword == "const":
            return json_equal(value, argument)
        if keyword == "enum":
            return isinstance(argument, list) and any(json_equal(value, v) for v in argument)
        if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if not _is_number(argument):
                return None
            x, bound = _as_decimal(value), _as_decimal(argument)
            return {
                "minimum": x >= bound,
                "maximum": x <= bound,
                "exclusiveMinimum": x > bound,
                "exclusiveMaximum": x < bound,
            }[keyword]
        if keyword == "multipleOf":
            if not _is_number(argument) or argument <= 0:
                return None
            return _as_decimal(value) % _as_decimal(argument) == 0
        if keyword in ("minLength", "maxLength", "minItems", "maxItems"):
            if not _is_number(argument):
                return None
            size = len(value)  # code points for strings, as JSON Schema counts
            return size >= argument if keyword.startswith("min") else size <= argument
        if keyword in ("minProperties", "maxProperties"):
            if not _is_number(argument):
                return None
            return len(value) >= argument if keyword == "minProperties" else len(value) <= argument
        if keyword == "required":
            return isinstance(argument, list) and all(name in value for name in argument)
        if keyword == "uniqueItems":
            if argument is not True:
                return True
            return len({canonical(item) for item in value}) == len(value)
    except (decimal.InvalidOperation, TypeError, ValueError, OverflowError):
        return None
    return None


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value under JSON Schema equality (1 == 1.0, key order free)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if _is_number(value):
        try:
            return ("number", _as_decimal(value).normalize())
        except decimal.InvalidOperation:
            return ("number", repr(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(canonical(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


class SchemaFacts:
    """Upper bounds on what schemas of one document validate, memoised per schema object.

    Used to prove oneOf branches exclusive and keywords redundant. Memoised so
    that a hostile document (branches referencing branches) costs linear time.
    """

    # Past this many branches oneOf is not worth proving exclusive.
    MAX_ONE_OF_BRANCHES = 256

    def __init__(self, root: Any) -> None:
        self.root = root
        self._types: dict[int, frozenset[str]] = {}
        self._values: dict[int, frozenset[Any] | None] = {}
        self._required: dict[int, dict[str, frozenset[Any]]] = {}
        self._names: dict[int, frozenset[str]] = {}
        self._depth = 0  # beyond MAX_DEPTH nested lookups give up (soundly)

    MAX_DEPTH = 64

    def _deeper(self) -> bool:
        return self._depth >= self.MAX_DEPTH

    def target(self, schema: dict[str, Any]) -> Any:
        ref = schema.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            return resolve_pointer(self.root, ref[1:])
        return _MISSING

    def types(self, schema: Any) -> frozenset[str]:
        """The JSON types of the values ``schema`` validates, at most."""
        if schema is False:
            return frozenset()
        if not isinstance(schema, dict):
            return _ALL_TYPES
        key = id(schema)
        if key in self._types:
            return self._types[key]
        if self._deeper():
            return _ALL_TYPES
        self._types[key] = _ALL_TYPES  # a cycle gives no information
        self._depth += 1
        try:
            types = self._compute_types(schema)
        finally:
            self._depth -= 1
        self._types[key] = types
        return types

    def _compute_types(self, schema: dict[str, Any]) -> frozenset[str]:
        types = _ALL_TYPES
        if "type" in schema:
            types &= type_set(schema["type"])
        if "const" in schema:
            types &= _expand_number(frozenset({json_type(schema["const"])}))
        if isinstance(schema.get("enum"), list):
            types &= _expand_number(frozenset(json_type(v) for v in schema["enum"]))
        target = self.target(schema)
        if target is not _MISSING:
            types &= self.types(target)
        if isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                types &= self.types(branch)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                types &= frozenset().union(*(self.types(branch) for branch in branches))
        return types

    def values(self, schema: Any) -> frozenset[Any] | None:
        """The canonical values ``schema`` allows, if it names them (const/enum); else None."""
        if not isinstance(schema, dict):
            return None
        key = id(schema)
        if key in self._values:
            return self._values[key]
        if self._deeper():
            return None
        self._values[key] = None
        self._depth += 1
        try:
            found = self._compute_values(schema)
        finally:
            self._depth -= 1
        self._values[key] = found
        return found

    def _compute_values(self, schema: dict[str, Any]) -> frozenset[Any] | None:
        found: frozenset[Any] | None = None
        if "const" in schema:
            found = frozenset({canonical(schema["const"])})
        elif isinstance(schema.get("enum"), list):
            found = frozenset(canonical(value) for value in schema["enum"])
        else:
            target = self.target(schema)
            candidates = [target] if target is not _MISSING else []
            if isinstance(schema.get("allOf"), list):
                candidates.extend(schema["allOf"])
            for candidate in candidates:
                found = self.values(candidate)
                if found is not None:
                    break
        return found

    def required_values(self, schema: Any) -> dict[str, frozenset[Any]]:
        """Properties an object must have whose values are limited to a known set."""
        if not isinstance(schema, dict):
            return {}
        key = id(schema)
        if key in self._required:
            return self._required[key]
        if self._deeper():
            return {}
        self._required[key] = {}
        self._depth += 1
        try:
            found = self._compute_required_values(schema)
        finally:
            self._depth -= 1
        self._required[key] = found
        return found

    def _compute_required_values(self, schema: dict[str, Any]) -> dict[str, frozenset[Any]]:
        found: dict[str, frozenset[Any]] = {}
        properties, required = schema.get("properties"), schema.get("required")
        if isinstance(properties, dict) and isinstance(required, list):
            for name in required:
                if isinstance(name, str) and name in properties:
                    values = self.values(properties[name])
                    if values is not None:
                        found[name] = values
        target = self.target(schema)
        parts = [target] if target is not _MISSING else []
        if isinstance(schema.get("allOf"), list):
            parts.extend(schema["allOf"])
        for part in parts:
            for name, values in self.required_values(part).items():
                found.setdefault(name, values)
        return found

    def required_names(self, schema: Any) -> frozenset[str]:
        """Names an object valid against ``schema`` must have."""
        if not isinstance(schema, dict):
            return frozenset()
        key = id(schema)
        if key in self._names:
            return self._names[key]
        if self._deeper():
            return frozenset()
        self._names[key] = frozenset()
        self._depth += 1
        try:
            names = self._compute_required_names(schema)
        finally:
            self._depth -= 1
        self._names[key] = names
        return names

    def _compute_required_names(self, schema: dict[str, Any]) -> frozenset[str]:
        required = schema.get("required")
        names = (
            frozenset(n for n in required if isinstance(n, str))
            if isinstance(required, list)
            else frozenset()
        )
        target = self.target(schema)
        if target is not _MISSING:
            names |= self.required_names(target)
        if isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                names |= self.required_names(branch)
        return names

    def exclusive(self, left: Any, right: Any) -> bool:
        """Whether no value is valid against both (a sufficient test, not an exact one)."""
        left_types, right_types = self.types(left), self.types(right)
        if not left_types & right_types:
            return True
        left_values, right_values = self.values(left), self.values(right)
        if left_values is not None and right_values is not None:
            return not left_values & right_values
        if left_types <= {"object"} or right_types <= {"object"}:
            left_props, right_props = self.required_values(left), self.required_values(right)
            for name in left_props.keys() & right_props.keys():
                if not left_props[name] & right_props[name]:
                    return True
        return False

    def pairwise_exclusive(self, branches: Sequence[Any]) -> bool:
        if len(branches) > self.MAX_ONE_OF_BRANCHES:
            return False
        return all(
            self.exclusive(branches[i], branches[j])
            for i in range(len(branches))
            for j in range(i + 1, len(branches))
        )


def branches_exclusive(branches: Sequence[Any], root: Any) -> bool:
    """Whether at most one of ``branches`` can match any value (schemas of ``root``)."""
    return SchemaFacts(root).pairwise_exclusive(branches)


# --- regex (ECMA-262) features --------------------------------------------------------

# Characters JSON writes escaped: a pattern that matches them literally makes
# an engine that matches the raw JSON text write them unescaped.
_JSON_SPECIAL = frozenset({0x22, 0x5C, *range(0x20)})
_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}
_CLASS_ESCAPES = frozenset("dDwWsS")


@dataclass
class _Node:
    kind: str  # "start", "end", "atom", "group", "lookaround"
    quantified: bool = False
    alternatives: list[list[_Node]] = field(default_factory=list)


class _RegexScan:
    """A lenient ECMA-262 pattern reader that notes the features the analysis cares about.

    Syntax it does not understand is read as literal text: whatever the
    engine then does with it, it refuses (a parse error) or over-constrains.
    """

    MAX_DEPTH = 100

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.depth = 0
        self.problems: dict[str, str] = {}  # kind -> the first message of that kind

    def note(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, message)

    def parse(self) -> list[list[_Node]]:
        alternatives = self.alternation()
        while self.pos < len(self.text):  # a stray ")"
            self.pos += 1
            alternatives[-1].append(_Node("atom"))
            alternatives[-1].extend(self.sequence())
        return alternatives

    def alternation(self) -> list[list[_Node]]:
        alternatives = [self.sequence()]
        while self.pos < len(self.text) and self.text[self.pos] == "|":
            self.pos += 1
            alternatives.append(self.sequence())
        return alternatives

    def sequence(self) -> list[_Node]:
        items: list[_Node] = []
        while self.pos < len(self.text) and self.text[self.pos] not in "|)":
            node = self.term()
            if node is not None:
                if self.quantifier():
                    node.quantified = True
                items.append(node)
        return items

    def quantifier(self) -> bool:
        text, start = self.text, self.pos
        if start >= len(text):
            return False
        if text[start] in "*+?":
            self.pos += 1
        elif text[start] == "{":
            end = text.find("}", start)
            body = text[start + 1 : end] if end != -1 else ""
            parts = body.split(",")
            if (
                end == -1
                or not parts[0].isdigit()
                or len(parts) > 2
                or (len(parts) == 2 and parts[1] and not parts[1].isdigit())
            ):
                return False
            self.pos = end + 1
        else:
            return False
        if self.pos < len(text) and text[self.pos] in "?+":  # lazy / possessive
            self.pos += 1
        return True

    def term(self) -> _Node | None:
        char = self.text[self.pos]
        if char == "^":
            self.pos += 1
            return _Node("start")
        if char == "$":
            self.pos += 1
            return _Node("end")
        if char == "(":
            return self.group()
        if char == "[":
            self.char_class()
            return _Node("atom")
        if char == "\\":
            self.escape(in_class=False)
            return _Node("atom")
        self.pos += 1
        if char != "." and ord(char) in _JSON_SPECIAL:
            self.note_special(char)
        return _Node("atom")

    def group(self) -> _Node:
        text = self.text
        self.pos += 1
        kind = "group"
        if text.startswith("?=", self.pos) or text.startswith("?!", self.pos):
            kind = "lookaround"
            self.pos += 2
        elif text.startswith("?<=", self.pos) or text.startswith("?<!", self.pos):
            kind = "lookaround"
            self.pos += 3
        elif text.startswith("?:", self.pos):
            self.pos += 2
        elif text.startswith("?<", self.pos):
            end = text.find(">", self.pos)
            self.pos = end + 1 if end != -1 else self.pos + 2
        if kind == "lookaround":
            self.note("lookaround", "lookahead and lookbehind assertions are not enforced")
        self.depth += 1
        if self.depth > self.MAX_DEPTH:
            self.note("depth", "groups are nested too deeply to analyse")
            self.pos = len(text)
            return _Node(kind)
        alternatives = self.alternation()
        self.depth -= 1
        if self.pos < len(text) and text[self.pos] == ")":
            self.pos += 1
        return _Node(kind, alternatives=alternatives)

    def escape(self, *, in_class: bool) -> tuple[str, int | None]:
        """Read an escape; returns ("char", code point) or ("class", None)."""
        text = self.text
        self.pos += 1
        if self.pos >= len(text):
            return "char", 0x5C
        char = text[self.pos]
        self.pos += 1
        if char in _CLASS_ESCAPES:
            if char == "S" and not in_class:
                self.note_unicode_whitespace("\\S")
            return "class", None
        if char in ("p", "P") and self.pos < len(text) and text[self.pos] == "{":
            end = text.find("}", self.pos)
            self.pos = end + 1 if end != -1 else len(text)
            return "class", None
        code: int | None
        if char in _SIMPLE_ESCAPES and not (char == "0" and self.peek_digit()):
            code = _SIMPLE_ESCAPES[char]
        elif char == "b":
            code = 0x08 if in_class else None  # outside a class: a word boundary
        elif char == "c" and self.pos < len(text) and text[self.pos].isalpha():
            code = ord(text[self.pos]) % 32
            self.pos += 1
        elif char == "x" and _is_hex(text[self.pos : self.pos + 2], 2):
            code = int(text[self.pos : self.pos + 2], 16)
            self.pos += 2
        elif char == "u" and text.startswith("{", self.pos):
            end = text.find("}", self.pos)
            digits = text[self.pos + 1 : end] if end != -1 else ""
            code = int(digits, 16) if digits and _is_hex(digits, len(digits)) else ord("u")
            if end != -1 and code != ord("u"):
                self.pos = end + 1
        elif char == "u" and _is_hex(text[self.pos : self.pos + 4], 4):
            code = int(text[self.pos : self.pos + 4], 16)
            self.pos += 4
        else:
            code = ord(char)  # an identity escape: the character itself
        if code is not None and code in _JSON_SPECIAL and not in_class:
            self.note_special(chr(code))
        return "char", code

    def peek_digit(self) -> bool:
        return self.pos < len(self.text) and self.text[self.pos].isdigit()

    def char_class(self) -> None:
        text = self.text
        self.pos += 1
        negated = self.pos < len(text) and text[self.pos] == "^"
        if negated:
            self.pos += 1
        members: list[tuple[int, int] | None] = []  # code-point ranges; None: a class escape
        while self.pos < len(text) and text[self.pos] != "]":
            low = self.class_atom(negated)
            if (
                low is not None
                and self.pos + 1 < len(text)
                and text[self.pos] == "-"
                and text[self.pos + 1] != "]"
            ):
                self.pos += 1
                high = self.class_atom(negated)
                members.append((low, high) if high is not None else None)
            else:
                members.append((low, low) if low is not None else None)
        if self.pos < len(text):
            self.pos += 1  # the closing "]"
        if negated:
            return
        # A class with at least one member JSON writes unescaped is matched
        # against those members only; one made of specials only is not
        # (measured: "[\\t ]" never yields a raw tab, "[\\t]" does).
        if members and not any(_has_plain_char(member) for member in members):
            self.note(
                "json_special",
                "it matches characters JSON must escape (a quote, a backslash or a "
                "control character), which the engine would write unescaped",
            )

    def class_atom(self, negated: bool) -> int | None:
        text = self.text
        if text[self.pos] == "\\":
            kind, code = self.escape(in_class=True)
            if kind == "class":
                escape = text[self.pos - 1]
                if (escape == "s" and negated) or (escape == "S" and not negated):
                    self.note_unicode_whitespace("[^\\s]" if negated else "[\\S]")
                return None
            return code
        self.pos += 1
        return ord(text[self.pos - 1])

    def note_special(self, char: str) -> None:
        self.note(
            "json_special",
            f"it matches {_describe_char(char)} literally, which the engine would write "
            "unescaped (invalid JSON)",
        )

    def note_unicode_whitespace(self, what: str) -> None:
        self.note(
            "unicode_whitespace",
            f"{what} lets Unicode spaces through (the engine's \\s is ASCII-only, "
            "ECMA-262's is not)",
        )


def _describe_char(char: str) -> str:
    if char == '"':
        return "a double quote"
    if char == "\\":
        return "a backslash"
    return f"the control character U+{ord(char):04X}"


def _has_plain_char(member: tuple[int, int] | None) -> bool:
    if member is None:
        return True  # \\d, \\w, \\s and their negations all hold plain characters
    low, high = member
    # Only 34 code points are special, so a longer range always has a plain one.
    return any(code not in _JSON_SPECIAL for code in range(low, min(high, low + 40) + 1))


def _is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdefABCDEF" for c in text)


def _anchor_problems(alternatives: list[list[_Node]], at_start: bool, at_end: bool) -> bool:
    """Whether an anchor sits somewhere it could not match at the start/end of the string."""
    for items in alternatives:
        for index, item in enumerate(items):
            before = all(other.kind == "start" for other in items[:index])
            after = all(other.kind == "end" for other in items[index + 1 :])
            if item.kind == "start" and not (at_start and before and not item.quantified):
                return True
            if item.kind == "end" and not (at_end and after and not item.quantified):
                return True
            if item.kind in ("group", "lookaround") and _anchor_problems(
                item.alternatives,
                at_start and before and not item.quantified,
                at_end and after and not item.quantified,
            ):
                return True
    return False


def pattern_problems(pattern: str, support: PatternSupport) -> list[str]:
    """Why an engine with ``support`` would not enforce ``pattern`` (empty: it would)."""
    scan = _RegexScan(pattern)
    alternatives = scan.parse()
    supported = {
        "lookaround": support.lookaround,
        "unicode_whitespace": support.unicode_whitespace,
        "json_special": support.escapes_json_specials,
        "depth": False,
    }
    problems = [message for kind, message in scan.problems.items() if not supported[kind]]
    if not support.inner_anchors and _anchor_problems(alternatives, True, True):
        problems.append(
            "an anchor (^ or $) inside the pattern is treated as empty, so strings the "
            "pattern can never match are accepted"
        )
    return problems


def iter_labels(findings: Iterable[Finding]) -> Iterator[str]:
    """Each distinct metric label among ``findings``, once."""
    seen: set[str] = set()
    for finding in findings:
        if finding.metric_keyword not in seen:
            seen.add(finding.metric_keyword)
            yield finding.metric_keyword
