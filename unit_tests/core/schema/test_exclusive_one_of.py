"""A ``oneOf`` proved exclusive written as ``anyOf``: what each proof writes, and what it keeps.

That every such rewrite accepts exactly what the ``oneOf`` accepts, on random
schemas, is ``test_exclusive_one_ofs_written_as_any_of...`` in
``test_schema_rewrite_equivalence.py``; here are the shapes real schemas
have (each named after the jsonschemabench schema it stands for), and the
engines serving them.
"""

from __future__ import annotations

from typing import Any

import pytest
from unit_tests.conftest import assert_served_and_enforced
from unit_tests.core.schema.test_schema_rewrite_equivalence import assert_equivalent

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.schema.exclusive_one_of import MAX_SHARED_NAMES
from grammar_guard.core.schema.rewrite import rewrite_schema

NUMBER = {"type": "number"}
LINK = {"type": "string", "pattern": "^/"}
# Glaiveai2K calculate_area_404e19e5: the branches name the shape, the node requires it.
SHAPES = {
    "type": "object",
    "properties": {"shape": {"enum": ["square", "circle"]}, "side": NUMBER, "radius": NUMBER},
    "required": ["shape"],
    "oneOf": [
        {"properties": {"shape": {"const": "square"}, "side": NUMBER}},
        {"properties": {"shape": {"const": "circle"}, "radius": NUMBER}},
    ],
}
# A branch naming a shape the node does not allow: the merged property holds
# both an enum and a const, which xgrammar would read as the const alone.
TRIANGLE = {
    **SHAPES,
    "oneOf": [SHAPES["oneOf"][0], {"properties": {"shape": {"const": "triangle"}}}],
}
# Github_trivial o51159: untyped branches that constrain objects only.
CARD = {
    "oneOf": [
        {
            "additionalProperties": False,
            "properties": {"provider": {"enum": ["mastercard"]}},
            "required": ["provider"],
        },
        {
            "additionalProperties": False,
            "properties": {"provider": {"enum": ["visa"]}, "code": {"type": "integer"}},
            "required": ["provider", "code"],
        },
    ]
}
# Github_trivial o10092: closed objects with no name in common, both taking {}.
CURSOR = {
    "type": "object",
    "oneOf": [
        {"additionalProperties": False, "properties": {"next": {"type": "string"}}},
        {"additionalProperties": False, "properties": {"previous": {"type": "string"}}},
    ],
}
# JSON Schema Store's dstack configuration: closed objects, one requiring a name
# the other does not list.
RUN = {
    "oneOf": [
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"commands": {"type": "array"}, "image": {"type": "string"}},
            "required": ["commands"],
        },
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"commands": {"type": "array"}, "port": {"type": "integer"}},
            "required": ["commands", "port"],
        },
    ]
}
# Github_easy o90946: the same through references, a shared name with values of its own.
SUBJECT = {
    "$defs": {
        "first": {
            "type": "object",
            "properties": {"kind": {"const": "first"}, "first": {"type": "boolean"}},
            "additionalProperties": False,
        },
        "second": {
            "type": "object",
            "properties": {"kind": {"const": "second"}, "second": {"type": "boolean"}},
            "additionalProperties": False,
        },
    },
    "oneOf": [{"$ref": "#/$defs/first"}, {"$ref": "#/$defs/second"}],
}

# Github_easy o90249: an absolute URL or a relative path, told apart by how they start.
HREF = {
    "oneOf": [
        {"type": "string", "pattern": "^https?://.+$"},
        {"type": "string", "pattern": "^\\./.+$"},
    ]
}
# Snowplow sp_209: untyped branches that constrain strings only (a format, a pattern).
API_KEY = {"oneOf": [{"format": "uuid"}, {"pattern": "^\\$[A-Z0-9-_]+"}]}
# Github_easy o89710: one sender or several, told apart by how many items "from" holds.
SENDERS = {
    "type": "object",
    "oneOf": [
        {
            "properties": {"from": {"type": "array", "minItems": 1, "maxItems": 1}},
            "required": ["from"],
        },
        {
            "properties": {"from": {"type": "array", "minItems": 2}, "sender": {"type": "string"}},
            "required": ["from", "sender"],
        },
    ],
}
# Two bands of one number, meeting at an end only one of them holds.
BANDS = {"oneOf": [{"type": "integer", "maximum": 3}, {"type": "number", "exclusiveMinimum": 3}]}
# A CSS length or "auto": the named value fails the other branch's pattern.
SIZE = {"oneOf": [{"const": "auto"}, {"type": "string", "pattern": "^[0-9]+px$"}]}
# An address of either family: both patterns may start with a digit, and no
# string matches both (their automata tell).
ADDRESS = {"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]}
# Github_trivial o25761: the branches tell "_attributes" apart by the "init_system"
# it requires, one naming "upstart", the other any string but that.
SERVICES = {
    "type": "object",
    "required": ["_elements"],
    "oneOf": [
        {
            "properties": {
                "_attributes": {
                    "type": "object",
                    "required": ["init_system"],
                    "properties": {"init_system": {"type": "string", "not": {"enum": ["upstart"]}}},
                },
                "_elements": {"type": "array", "items": {"type": "string"}},
            }
        },
        {
            "properties": {
                "_attributes": {
                    "type": "object",
                    "required": ["init_system"],
                    "properties": {"init_system": {"enum": ["upstart"]}},
                },
                "_elements": {"type": "array", "items": {"type": "integer"}},
            }
        },
    ],
}

INSTANCES: list[Any] = [
    {},
    {"shape": "square", "side": 1},
    {"shape": "circle", "radius": 1},
    {"shape": "square", "radius": 1},
    {"shape": "circle"},
    {"provider": "mastercard"},
    {"provider": "visa", "code": 1},
    {"provider": "visa"},
    {"provider": "mastercard", "code": 1},
    {"next": "n"},
    {"previous": "p"},
    {"next": "n", "previous": "p"},
    {"kind": "first", "first": True},
    {"kind": "second"},
    {"kind": "first", "second": True},
    {"first": True},
    "https://a.b/c",
    "./c",
    "c",
    "123e4567-e89b-12d3-a456-426614174000",
    "$KEY",
    None,
    1,
    3,
    3.5,
    {"from": [1]},
    {"from": [1, 2], "sender": "s"},
    {"from": [1, 2]},
    {"from": []},
    "x",
    [],
    "auto",
    "12px",
    "12",
    "10.0.0.1",
    "::1",
    "2001:db8::1",
    "1.2.3",
    {"commands": []},
    {"commands": [], "port": 1},
    {"commands": [], "image": "i", "port": 1},
    {"port": 1},
]


@pytest.mark.parametrize(
    ("schema", "added"),
    [
        (SHAPES, {}),
        (CARD, {"type": "object"}),  # no other value passes just one branch
        (CURSOR, {"minProperties": 1}),  # {} passes both branches
        (SUBJECT, {"minProperties": 1}),
        (HREF, {}),
        (API_KEY, {"type": "string"}),
        (SENDERS, {"type": "object"}),
        (BANDS, {}),
        (SIZE, {}),
        (ADDRESS, {"type": "string"}),
        (RUN, {}),
    ],
    ids=[
        "discriminated-by-the-node",
        "objects-only",
        "closed-disjoint",
        "closed-by-reference",
        "patterns-starting-apart",
        "strings-only",
        "counts-apart",
        "bounds-apart",
        "named-value-outside",
        "patterns-apart-by-automata",
        "closed-lacking-a-required-name",
    ],
)
def test_exclusive_branches_become_an_any_of_with_what_the_one_of_implied(
    schema: dict[str, Any], added: dict[str, Any]
) -> None:
    rewritten = assert_equivalent(schema, INSTANCES)
    assert "oneOf" not in rewritten
    # The node's keywords are merged into the branches (boolean_forms), so what
    # the proof added is in each of them.
    branches = rewritten["anyOf"]
    assert len(branches) == len(schema["oneOf"])
    assert all(added.items() <= branch.items() for branch in branches), rewritten


@pytest.mark.parametrize(
    "schema",
    [
        # Strings pass both branches: no value is valid, nothing to write.
        {**CARD, "type": "string"},
        # Open objects: {"next": "a", "previous": "b"} passes both (and a pattern has no
        # complement for the combinators to write the oneOf out with).
        {
            "type": "object",
            "oneOf": [{"properties": {"next": LINK}}, {"properties": {"previous": LINK}}],
        },
        # Closed, but each lists the names the other requires: {"a": 1, "b": 1} passes both.
        {
            "oneOf": [
                {
                    "additionalProperties": False,
                    "properties": {"a": {}, "b": {}},
                    "required": ["a"],
                },
                {
                    "additionalProperties": False,
                    "properties": {"a": {}, "b": {}},
                    "required": ["b"],
                },
            ]
        },
        # A shared name whose values may agree.
        {
            "type": "object",
            "oneOf": [
                {"additionalProperties": False, "properties": {"a": {"type": "integer"}}},
                {"additionalProperties": False, "properties": {"a": {"type": "number"}}},
            ],
        },
        # Strings starting with 40 "ab"s pass both, and the pattern has no complement
        # written (test_pattern_complement.py: "^a" has, and the oneOf is written out).
        {"oneOf": [{"type": "string"}, {"pattern": "^(?:ab){40}"}]},
        # Unanchored: "./x" matches both.
        {"oneOf": [{"type": "string", "pattern": "x"}, {"type": "string", "pattern": "^\\./"}]},
        # "12px" is named and matches the pattern too.
        {"oneOf": [{"enum": ["auto", "12px"]}, {"type": "string", "pattern": "^[0-9]+px$"}]},
        # "1.2.3.4" is a host name and an IPv4 address.
        {"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "hostname"}]},
        # Two items pass both counts.
        {
            "oneOf": [
                {"type": "array", "maxItems": 2, "items": {"pattern": "^a"}},
                {"type": "array", "minItems": 2, "items": {"pattern": "^a"}},
            ]
        },
    ],
    ids=[
        "no-type-left",
        "open-objects",
        "closed-listing-what-the-other-requires",
        "shared-name-overlapping",
        "a-pattern",
        "unanchored",
        "named-value-inside",
        "patterns-sharing-a-string",
        "counts-meeting",
    ],
)
def test_branches_not_proved_exclusive_stay_a_one_of(schema: dict[str, Any]) -> None:
    rewritten = rewrite_schema(schema)
    assert rewritten is schema or "oneOf" in rewritten


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (SHAPES, '{"shape":"circle","radius":2}', '{"shape":"square","side":"2"}'),
        (CARD, '{"provider":"visa","code":1}', '{"provider":"mastercard","code":1}'),
        (CARD, '{"provider":"mastercard"}', "1"),
        (CURSOR, '{"next":"n"}', "{}"),
        (CURSOR, '{"previous":"p"}', '{"next":"n","previous":"p"}'),
        (SUBJECT, '{"kind":"first","first":true}', "{}"),
        (TRIANGLE, '{"shape":"square"}', '{"shape":"triangle"}'),
        (RUN, '{"commands":[]}', '{"port":1}'),
        (RUN, '{"commands":[],"port":1}', '{"commands":[],"image":"i","port":1}'),
        (HREF, '"./model.glb"', '"model.glb"'),
        (API_KEY, '"123e4567-e89b-12d3-a456-426614174000"', "12"),
        (SENDERS, '{"from":[1]}', '{"from":[1,2]}'),
        (SIZE, '"12px"', '"12"'),
        (SIZE, '"auto"', '"autopx"'),
        (ADDRESS, '"::1"', '"1.2.3"'),
        (ADDRESS, '"10.0.0.1"', '"10.0.0.256"'),
        # Narrowed: "_attributes" is required, which tells the branches apart.
        (SERVICES, '{"_attributes":{"init_system":"upstart"},"_elements":[1]}', '{"_elements":[]}'),
        (
            SERVICES,
            '{"_attributes":{"init_system":"x"},"_elements":["a"]}',
            '{"_attributes":{"init_system":"x"},"_elements":[1]}',
        ),
    ],
)
def test_refused_before_now_served_and_enforced(
    routed: RoutedEngine, schema: dict[str, Any], valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


def test_closed_branches_sharing_many_names_are_not_compared() -> None:
    # Each pair of branches would read every shared name: past the bound,
    # exclusivity is not proved, and the work stays in proportion to the schema.
    names = [f"p{index}" for index in range(MAX_SHARED_NAMES + 1)]
    schema = {
        "type": "object",
        "oneOf": [
            {"additionalProperties": False, "properties": {n: {"const": k} for n in names}}
            for k in range(2)
        ],
    }
    assert "oneOf" in rewrite_schema(schema)
    schema["oneOf"][0]["properties"].pop(names[0])
    assert "oneOf" not in rewrite_schema(schema)
