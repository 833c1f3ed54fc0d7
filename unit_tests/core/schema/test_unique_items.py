"""``uniqueItems`` over items of a few values is served as the arrays it allows.

That the rewrite accepts exactly what ``uniqueItems`` accepts is
``test_schema_rewrite_equivalence.py``'s property test; here, what a client
sees: such schemas are served and enforced, and the others are still
refused rather than served loose.
"""

from __future__ import annotations

from typing import Any

import pytest
from unit_tests.conftest import assert_served_and_enforced, compact_json_spec

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.schema.unique_items import MAX_CANDIDATES, unique_arrays_written

TAGS = {
    "type": "object",
    "properties": {
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True}
    },
    "required": ["tags"],
}
# The JSON-Schema-Test-Suite's uniqueItems.json, "with an array of items and additionalItems=false".
CLOSED_PAIR = {
    "prefixItems": [{"type": "boolean"}, {"type": "boolean"}],
    "items": False,
    "uniqueItems": True,
}


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (TAGS, '{"tags":["c","a"]}', '{"tags":["a","a"]}'),
        (TAGS, '{"tags":[]}', '{"tags":["a","b","c","a"]}'),
        (CLOSED_PAIR, "[false,true]", "[true,true]"),
        (CLOSED_PAIR, '"x"', "[true,false,true]"),
    ],
)
def test_unique_items_over_a_few_values_is_served_and_enforced(
    routed: RoutedEngine, schema: Any, valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


def test_a_list_of_tags_stays_on_xgrammar() -> None:
    assert route(compact_json_spec(TAGS)).engine is EngineName.XGRAMMAR


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        {"type": "array", "prefixItems": [{"const": 1}], "uniqueItems": True},
        # Seven values make 13,700 arrays: past the bound, however few pass.
        {"type": "array", "items": {"enum": list(range(7))}, "uniqueItems": True},
        {"type": "array", "items": {"$ref": "#/$defs/d"}, "uniqueItems": True},
    ],
)
def test_unique_items_of_values_without_end_is_still_refused(schema: dict[str, Any]) -> None:
    assert unique_arrays_written(schema) is None
    with pytest.raises(UnenforcedKeywordError, match="'uniqueItems' at /uniqueItems"):
        route(compact_json_spec({**schema, "$defs": {"d": {"type": "integer"}}}))


def test_candidates_are_bounded_before_any_is_decided() -> None:
    # Four values give 65 arrays, all decided; the bound is what five would pass.
    four = {"type": "array", "items": {"enum": [1, 2, 3, 4]}, "uniqueItems": True}
    assert len(unique_arrays_written(four)["enum"]) == 65 <= MAX_CANDIDATES
    five = {**four, "items": {"enum": [1, 2, 3, 4, 5]}}
    assert unique_arrays_written(five) is None
    assert len(unique_arrays_written({**five, "maxItems": 2})["enum"]) == 26
