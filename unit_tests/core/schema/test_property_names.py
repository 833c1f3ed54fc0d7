"""``propertyNames`` beside listed properties, decided name by name (property_names.py).

That the rewrite accepts exactly what the schema accepts, on random schemas,
is ``test_property_names_decided_accept_exactly_what_the_schema_accepts`` in
``test_schema_rewrite_equivalence.py``; here, what a client sees: such
schemas are served, names are checked, and the undecided stay refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from unit_tests.conftest import assert_served_and_enforced, compact_json_spec

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.schema.property_names import MAX_NAMES
from grammar_guard.core.schema.rewrite import rewrite_schema

LOWER = {"pattern": "^[a-z]+$"}
# A configuration file's keys: a few named ones, more of the same shape.
SETTINGS = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "max_size": {"type": "integer"}},
    "propertyNames": LOWER,
    "additionalProperties": {"type": "integer"},
}
# Only listed names may be in the object: propertyNames says no more than they do.
CLOSED = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
    "propertyNames": {"maxLength": 2},
    "additionalProperties": False,
}


def test_a_listed_name_the_names_refuse_leaves_the_properties() -> None:
    rewritten = rewrite_schema(SETTINGS)
    assert rewritten["properties"] == {"name": {"type": "string"}}
    assert rewritten["propertyNames"] == LOWER


def test_with_no_other_name_allowed_the_names_are_dropped() -> None:
    assert rewrite_schema(CLOSED) == {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("schema", "valid", "invalid"),
    [
        (SETTINGS, '{"name":"n","port":1}', '{"name":"n","port_no":1}'),
        (SETTINGS, '{"name":"n"}', '{"max_size":1}'),
        (SETTINGS, '{"retries":2}', '{"retries":"2"}'),
        (CLOSED, '{"id":1}', '{"tag":"t"}'),
    ],
)
def test_names_beside_listed_properties_are_served_and_enforced(
    routed: RoutedEngine, schema: Any, valid: str, invalid: str
) -> None:
    assert_served_and_enforced(routed, schema, valid, invalid)


@pytest.mark.parametrize(
    "schema",
    [
        # A refused name that is required: no object is valid, left as written.
        {**SETTINGS, "required": ["max_size"]},
        # Undecided: the evaluator does not follow references.
        {
            "$defs": {"lower": LOWER},
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "propertyNames": {"$ref": "#/$defs/lower"},
        },
        {
            "type": "object",
            "properties": {f"p{index}": {} for index in range(MAX_NAMES + 1)},
            "propertyNames": LOWER,
        },
    ],
    ids=["required-refused-name", "undecided", "too-many-names"],
)
def test_names_not_decided_stay_refused(schema: Any) -> None:
    with pytest.raises(UnenforcedKeywordError, match="propertyNames"):
        route(compact_json_spec(schema))
