"""What a grammar engine enforces of draft 2020-12, as data the analysis reads.

Each engine supplies one :class:`EngineCapabilities` (xgrammar's is
:data:`grammar_guard.core.engines.xgrammar.capabilities.XGRAMMAR`), so the analysis
itself never imports an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
    # Whether a negated class that names a quote or a backslash (``[^"\\]``)
    # keeps them out of the string, as it says.
    negated_classes_keep_out_escapes: bool = True
    # Whether a pattern that matches every control character (U+0000-U+001F)
    # where it matches no quote or backslash (``[\\u0000-\\u001f]``) keeps
    # those two out, as it says.
    every_control_keeps_out_escapes: bool = True


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
    # Numbers between two bounds are written with at most this many digits
    # after the point; a range that holds none of those becomes an empty
    # rule, which lets a value be left out (``{"a":}``). None: no such limit.
    number_fraction_digits: int | None = None
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
    # Whether a listed property whose name is not ASCII, or holds a character
    # JSON escapes, is kept out of the additionalProperties path (xgrammar
    # excludes listed names by their text, which lets "ü" and "a\\nb" through
    # as additional properties).
    non_ascii_names_with_additional: bool = True
