"""References resolved within the document and written as pointers from its root.

What a user sees: a bundled 2020-12 schema (embedded ``$id``\\ s, anchors, a
``$dynamicRef`` with one anchor) is served with each reference meaning what
it meant; one that only another document or the dynamic scope could
resolve is left as written, and so refused as before. That each rewrite
keeps every verdict is checked by ``test_schema_rewrite_equivalence.py``
(random bundles, and the suite's ref.json, anchor.json and dynamicRef.json).
"""

from __future__ import annotations

from typing import Any

import pytest

from grammar_guard.core.schema.local_references import references_as_pointers
from grammar_guard.core.schema.rewrite import rewrite_schema

RESOLVED: list[tuple[str, Any, Any]] = [
    (
        "an embedded resource named relative to the root's $id",
        {
            "$id": "https://example.com/root.json",
            "properties": {"a": {"$ref": "item.json"}},
            "$defs": {"item": {"$id": "item.json", "type": "integer"}},
        },
        {
            "$id": "https://example.com/root.json",
            "properties": {"a": {"$ref": "#/$defs/item"}},
            "$defs": {"item": {"type": "integer"}},
        },
    ),
    (
        "a root without an $id: relative names resolve against a base of its own",
        {"items": {"$ref": "list"}, "$defs": {"list": {"$id": "list", "type": "array"}}},
        {"items": {"$ref": "#/$defs/list"}, "$defs": {"list": {"type": "array"}}},
    ),
    (
        "a pointer inside an embedded resource starts at that resource",
        {
            "$ref": "inner.json",
            "$defs": {
                "inner": {
                    "$id": "inner.json",
                    "$ref": "#/$defs/n",
                    "$defs": {"n": {"type": "number"}},
                }
            },
        },
        {
            "$ref": "#/$defs/inner",
            "$defs": {
                "inner": {"$ref": "#/$defs/inner/$defs/n", "$defs": {"n": {"type": "number"}}}
            },
        },
    ),
    (
        "an $anchor, and a pointer into a resource named by URI",
        {
            "$id": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed",
            "properties": {
                "a": {"$ref": "#name"},
                "b": {"$ref": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed#/$defs/s"},
            },
            "$defs": {"s": {"$anchor": "name", "type": "string"}},
        },
        {
            "$id": "urn:uuid:deadbeef-1234-0000-0000-4321feebdaed",
            "properties": {"a": {"$ref": "#/$defs/s"}, "b": {"$ref": "#/$defs/s"}},
            "$defs": {"s": {"type": "string"}},
        },
    ),
    (
        "a $dynamicRef whose name one $dynamicAnchor holds: every dynamic scope finds it",
        {"items": {"$dynamicRef": "#item"}, "$defs": {"i": {"$dynamicAnchor": "item"}}},
        {"items": {"$ref": "#/$defs/i"}, "$defs": {"i": {}}},
    ),
    (
        "a $dynamicRef with a pointer: a $ref",
        {"properties": {"gone": {"$dynamicRef": "#/$defs/no"}}, "$defs": {"no": False}},
        {"properties": {"gone": {"$ref": "#/$defs/no"}}, "$defs": {"no": False}},
    ),
    (
        "an $id inside a const is a value, not an identifier",
        {"$defs": {"c": {"$id": "c.json", "const": {"$id": "x"}}}, "$ref": "c.json"},
        {"$defs": {"c": {"const": {"$id": "x"}}}, "$ref": "#/$defs/c"},
    ),
]

LEFT: list[tuple[str, Any]] = [
    ("another document", {"$id": "https://example.com/a.json", "$ref": "b.json"}),
    (
        "a relative name against a base without paths",
        {"$id": "urn:example:root", "$ref": "item", "$defs": {"i": {"$id": "item"}}},
    ),
    ("an $id with a fragment", {"$ref": "#x", "$defs": {"x": {"$id": "#x"}}}),
    (
        "two $dynamicAnchors of the name: the dynamic scope decides",
        {
            "items": {"$dynamicRef": "#item"},
            "$defs": {
                "i": {"$dynamicAnchor": "item"},
                "j": {"$id": "j.json", "$dynamicAnchor": "item", "type": "string"},
            },
        },
    ),
    ("an anchor named twice", {"$defs": {"a": {"$anchor": "x"}, "b": {"$anchor": "x"}}}),
    (
        "a pointer to nothing",
        {"$defs": {"a": {"$id": "a.json"}}, "$ref": "a.json#/missing"},
    ),
    (
        "a pointer the engines would read percent-decoded",
        {"$defs": {"a b": {"$id": "a.json"}}, "$ref": "#/$defs/a%20b"},
    ),
    ("$ref beside $dynamicRef", {"$ref": "#", "$dynamicRef": "#", "$anchor": "r"}),
]


@pytest.mark.parametrize(
    ("schema", "expected"), [r[1:] for r in RESOLVED], ids=[r[0] for r in RESOLVED]
)
def test_references_within_the_document_become_root_pointers(schema: Any, expected: Any) -> None:
    assert references_as_pointers(schema) == expected


@pytest.mark.parametrize("schema", [k[1] for k in LEFT], ids=[k[0] for k in LEFT])
def test_a_reference_the_document_does_not_settle_leaves_it_as_written(schema: Any) -> None:
    assert references_as_pointers(schema) is schema


def test_plain_root_pointers_are_left_alone_without_a_copy() -> None:
    schema = {"$id": "https://example.com/s.json", "$ref": "#/$defs/a", "$defs": {"a": {}}}
    assert references_as_pointers(schema) is schema


def test_a_reference_to_a_boolean_is_written_as_the_boolean() -> None:
    # Neither engine takes a reference to `false`; the definition here
    # becomes one once its `not` of everything is rewritten.
    schema = {
        "properties": {"gone": {"$dynamicRef": "#/$defs/no"}, "any": {"$ref": "#/$defs/yes"}},
        "$defs": {"no": {"not": {}}, "yes": True},
    }
    assert rewrite_schema(schema) == {
        "properties": {"gone": False, "any": True},
        "$defs": {"no": False, "yes": True},
    }


def test_a_bundle_once_resolved_gets_the_other_rewrites() -> None:
    # Before: an embedded $id pinned the document, so its allOf stayed for
    # xgrammar to read as "any value".
    bundle = {
        "$ref": "n.json",
        "$defs": {"n": {"$id": "n.json", "allOf": [{"type": "integer"}, {"minimum": 2}]}},
    }
    assert rewrite_schema(bundle) == {
        "$ref": "#/$defs/n",
        "$defs": {"n": {"type": "integer", "minimum": 2}},
    }
