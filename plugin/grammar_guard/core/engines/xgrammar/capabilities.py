"""What xgrammar 0.2.8 enforces of a JSON schema, as measured (data only, no xgrammar import).

Every entry was found by compiling schemas with the options grammar-guard
uses (``any_whitespace=False``, ``separators=(",", ":")``, the default
``strict_mode=True``) and driving instances through a matcher; the probes
are the ``calibration`` tests in ``unit_tests/core/schema/test_schema_analysis.py``, so a
new xgrammar release that changes any of this fails them. The reasons are in
``docs/schema-enforcement.md``.
"""

from __future__ import annotations

from grammar_guard.core.schema.capabilities import (
    EngineCapabilities,
    MultipleOfSupport,
    PatternSupport,
)

# xgrammar replaces these formats by a regex of its own (which then shadows
# pattern, minLength and maxLength next to them); every other value is ignored.
XGRAMMAR_REGEX_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)

# Those of them whose regex accepts only valid values. Left out, with the
# value that gets through:
#   date, date-time   calendar validity: "2021-02-29", "2020-04-31"
#   time, date-time   leap seconds at any time: "22:59:60Z"
#   email             quoted local parts: "\"a\"b\"@example.com"
#   hostname          label and name length: a 64-character label
#   ipv6              an embedded IPv4 part with leading zeros: "::ffff:192.168.0.01"
#   json-pointer,     raw quotes and control characters (invalid JSON) and
#   relative-...      escaped "~" ("/a\u007e")
XGRAMMAR_EXACT_FORMATS = frozenset(
    {"duration", "ipv4", "uuid", "uri", "uri-reference", "uri-template"}
)

XGRAMMAR = EngineCapabilities(
    engine="xgrammar 0.2.8",
    exact_formats=XGRAMMAR_EXACT_FORMATS,
    formats_shadowing_string_keywords=XGRAMMAR_REGEX_FORMATS,
    pattern_shadows_lengths=True,
    # [1e-10, 2e-10] is written as nothing (its calibration: test_schema_rewrite.py).
    number_fraction_digits=6,
    pattern=PatternSupport(
        lookaround=False,  # (?=...) and (?!...) are read as empty; lookbehind is refused
        inner_anchors=False,  # "a^b" accepts "ab"
        unicode_whitespace=False,  # \S and [^\s] accept U+00A0, U+2028, U+FEFF...
        escapes_json_specials=False,  # "\t" in a pattern yields a raw tab
    ),
    multiple_of=MultipleOfSupport(
        number=False,
        integer=True,
        integer_max_divisor=1024,
        integer_max_range=10000,
    ),
    unenforced=frozenset(
        {
            "not",
            "if",
            "then",
            "else",
            "dependentRequired",
            "dependentSchemas",
            "uniqueItems",
            "contains",
            "$dynamicRef",
            "dependencies",  # draft-07, read by nothing in xgrammar
            "additionalItems",
        }
    ),
    # The converter reads the first of these it finds and nothing else.
    exclusive_keywords=("$ref", "const", "enum", "anyOf", "oneOf", "allOf"),
    implied_types=(
        ("properties", "object"),
        ("additionalProperties", "object"),
        ("unevaluatedProperties", "object"),
        ("items", "array"),
        ("prefixItems", "array"),
        ("unevaluatedItems", "array"),
    ),
    max_all_of_branches=1,  # two or more: "any JSON value"
    one_of_needs_disjoint_branches=True,
    required_outside_properties=False,
    max_pattern_properties=1,
    pattern_properties_with_properties=False,
    property_names_with_properties=False,
    property_names_with_pattern_properties=False,
    property_names_with_no_additional=False,
    property_names_any_schema=False,  # propertyNames {} lets keys be any JSON value
    ref_anchors=False,
    ref_remote=False,
    ref_pointer_escapes=False,
    embedded_resources=False,
    closed_objects=True,  # strict_mode: unlisted properties are refused
    non_ascii_names_with_additional=False,
)
