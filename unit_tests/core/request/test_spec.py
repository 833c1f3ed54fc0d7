"""GrammarSpec.build: canonical cache keys and clean refusals of bad request input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from grammar_guard.core.errors import MAX_REASON_CHARS, InvalidGrammarError
from grammar_guard.core.request.spec import MAX_CHOICES, CompileOptions, GrammarSpec, RequestKind

COMPACT = CompileOptions(any_whitespace=False)
DEFAULT = CompileOptions()

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


def build(kind: RequestKind, source: Any, options: CompileOptions = DEFAULT) -> GrammarSpec:
    return GrammarSpec.build(kind, source, options)


# --- one key per document -------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "tight", "loose"),
    [
        (
            RequestKind.JSON_SCHEMA,
            json.dumps(SCHEMA, separators=(",", ":")),
            json.dumps(SCHEMA, indent=4) + "\n\n",
        ),
        (RequestKind.CHOICE, '["yes","no"]', '[ "yes" ,\n\t"no" ]'),
        (
            RequestKind.STRUCTURAL_TAG,
            '{"type":"structural_tag","format":{"type":"const_string","value":"x"}}',
            '{ "type" : "structural_tag" ,\r\n'
            ' "format" : { "type": "const_string", "value": "x" } }',
        ),
    ],
)
def test_whitespace_does_not_change_the_key(kind: RequestKind, tight: str, loose: str) -> None:
    a, b = build(kind, tight), build(kind, loose)
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    # The canonical text is the compact form, and it still means the same document.
    assert a.text == tight
    assert json.loads(b.text) == json.loads(loose)


def test_escaped_and_literal_unicode_give_one_key() -> None:
    assert build(RequestKind.JSON_SCHEMA, '{"title": "caf\\u00e9"}') == build(
        RequestKind.JSON_SCHEMA, '{"title": "café"}'
    )


def test_member_order_is_kept_and_changes_the_key() -> None:
    ab = '{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}}'
    ba = '{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"integer"}}}'
    spec_ab, spec_ba = build(RequestKind.JSON_SCHEMA, ab), build(RequestKind.JSON_SCHEMA, ba)
    assert spec_ab != spec_ba
    assert spec_ab.text == ab
    assert spec_ba.text == ba
    assert spec_ba.text.index('"b"') < spec_ba.text.index('"a"')


def test_choice_order_changes_the_key() -> None:
    assert build(RequestKind.CHOICE, ["a", "b"]) != build(RequestKind.CHOICE, ["b", "a"])


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (RequestKind.JSON_SCHEMA, SCHEMA),
        (RequestKind.CHOICE, ["yes", "no", 'say "hi"']),
        (
            RequestKind.STRUCTURAL_TAG,
            {"type": "structural_tag", "format": {"type": "const_string", "value": "x"}},
        ),
    ],
)
def test_python_value_equals_the_same_text(kind: RequestKind, value: Any) -> None:
    from_value = build(kind, value)
    from_text = build(kind, json.dumps(value, indent=2))
    assert from_value == from_text
    assert hash(from_value) == hash(from_text)


def test_json_object_ignores_its_source() -> None:
    assert build(RequestKind.JSON_OBJECT, None) == build(RequestKind.JSON_OBJECT, "")
    assert build(RequestKind.JSON_OBJECT, None).text == ""


# --- options ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.REGEX, "[a-z]+"),
        (RequestKind.CHOICE, ["a", "b"]),
        (RequestKind.GRAMMAR, 'root ::= "a"'),
    ],
)
def test_options_do_not_split_non_json_kinds(kind: RequestKind, source: Any) -> None:
    compact, default = build(kind, source, COMPACT), build(kind, source, DEFAULT)
    assert compact == default
    assert hash(compact) == hash(default)
    assert compact.options == DEFAULT


@pytest.mark.parametrize(
    ("kind", "source"), [(RequestKind.JSON_SCHEMA, SCHEMA), (RequestKind.JSON_OBJECT, None)]
)
def test_options_split_json_kinds(kind: RequestKind, source: Any) -> None:
    compact, default = build(kind, source, COMPACT), build(kind, source, DEFAULT)
    assert compact != default
    assert compact.options == COMPACT
    assert default.options == DEFAULT


def test_kind_properties() -> None:
    # Structural tags are left out on purpose: they may embed JSON schemas.
    for kind in (RequestKind.JSON_SCHEMA, RequestKind.JSON_OBJECT):
        assert kind.takes_json_options
    for kind in (RequestKind.REGEX, RequestKind.CHOICE, RequestKind.GRAMMAR):
        assert not kind.takes_json_options
    assert {k for k in RequestKind if k.text_is_json} == {
        RequestKind.JSON_SCHEMA,
        RequestKind.CHOICE,
        RequestKind.STRUCTURAL_TAG,
    }


def test_same_text_different_kind_is_a_different_key() -> None:
    assert build(RequestKind.CHOICE, '["a"]') != build(RequestKind.REGEX, '["a"]')


# --- refusals -------------------------------------------------------------------


def refused(kind: RequestKind, source: Any) -> str:
    with pytest.raises(InvalidGrammarError) as info:
        build(kind, source)
    # vLLM answers a ValueError with a 400: the client's problem, not a server fault.
    assert isinstance(info.value, ValueError)
    assert str(info.value) == info.value.reason
    return info.value.reason


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.JSON_SCHEMA, '{"type": "object"'),
        (RequestKind.JSON_SCHEMA, "{'type': 'object'}"),
        (RequestKind.JSON_SCHEMA, '{"type": "object"} trailing'),
        (RequestKind.CHOICE, '["a", "b"'),
        (RequestKind.STRUCTURAL_TAG, '{"type": structural_tag}'),
    ],
)
def test_malformed_json_is_refused(kind: RequestKind, source: str) -> None:
    reason = refused(kind, source)
    assert kind.value in reason
    assert "not valid JSON" in reason


def test_nan_is_refused() -> None:
    reason = refused(RequestKind.JSON_SCHEMA, '{"type": "number", "maximum": NaN}')
    assert "json_schema" in reason


def test_integer_python_cannot_parse_is_refused_cleanly() -> None:
    # Valid JSON, but Python's json refuses integers over 4300 digits with a
    # plain ValueError; the contract is InvalidGrammarError for bad input.
    schema = '{"type": "integer", "maximum": ' + "9" * 5000 + "}"
    with pytest.raises(InvalidGrammarError, match="json_schema"):
        build(RequestKind.JSON_SCHEMA, schema)


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.JSON_SCHEMA, ""),
        (RequestKind.JSON_SCHEMA, "  \n\t "),
        (RequestKind.CHOICE, ""),
        (RequestKind.STRUCTURAL_TAG, " "),
        (RequestKind.GRAMMAR, ""),
        (RequestKind.GRAMMAR, " \n\t\n"),
    ],
)
def test_empty_text_is_refused(kind: RequestKind, source: str) -> None:
    reason = refused(kind, source)
    assert kind.value in reason
    assert "empty" in reason


@pytest.mark.parametrize("source", ["[1, 2]", "42", '"object"', "null", [{"type": "string"}]])
def test_non_object_schema_is_refused(source: Any) -> None:
    reason = refused(RequestKind.JSON_SCHEMA, source)
    assert "json_schema" in reason
    assert "object" in reason


@pytest.mark.parametrize("source", ["true", "false"])
def test_boolean_schema_is_allowed(source: str) -> None:
    assert build(RequestKind.JSON_SCHEMA, source).text == source


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false")])
def test_boolean_schema_as_a_value_equals_its_text(value: bool, text: str) -> None:
    assert build(RequestKind.JSON_SCHEMA, value) == build(RequestKind.JSON_SCHEMA, text)


@pytest.mark.parametrize("source", ["[1]", '"tag"', ["a"]])
def test_non_object_structural_tag_is_refused(source: Any) -> None:
    assert "structural_tag" in refused(RequestKind.STRUCTURAL_TAG, source)


@pytest.mark.parametrize("source", [[], "[]", " [ ] "])
def test_empty_choice_list_is_refused(source: Any) -> None:
    assert "choice" in refused(RequestKind.CHOICE, source)


def test_a_choice_longer_than_the_limit_is_refused_saying_so() -> None:
    assert build(RequestKind.CHOICE, [f"s{number}" for number in range(MAX_CHOICES)])
    reason = refused(RequestKind.CHOICE, [f"s{number}" for number in range(MAX_CHOICES + 1)])
    assert f"choice lists {MAX_CHOICES + 1:,} strings, and may list {MAX_CHOICES:,}" in reason


@pytest.mark.parametrize(
    "source", [["a", 1], ["a", None], [["a"]], '["a", 2]', '{"a": "b"}', '"a"']
)
def test_non_string_choices_are_refused(source: Any) -> None:
    assert "choice" in refused(RequestKind.CHOICE, source)


@pytest.mark.parametrize(
    ("kind", "source", "type_name"),
    [
        (RequestKind.REGEX, 42, "int"),
        (RequestKind.REGEX, None, "NoneType"),
        (RequestKind.REGEX, ["a"], "list"),
        (RequestKind.GRAMMAR, b'root ::= "a"', "bytes"),
        (RequestKind.GRAMMAR, {"root": "a"}, "dict"),
        (RequestKind.JSON_SCHEMA, None, "NoneType"),
        (RequestKind.JSON_SCHEMA, 3.5, "float"),
        (RequestKind.JSON_SCHEMA, b"{}", "bytes"),
        (RequestKind.CHOICE, ("a", "b"), "tuple"),
        (RequestKind.CHOICE, {"a", "b"}, "set"),
        (RequestKind.STRUCTURAL_TAG, 7, "int"),
    ],
)
def test_wrong_python_type_is_refused(kind: RequestKind, source: Any, type_name: str) -> None:
    reason = refused(kind, source)
    assert kind.value in reason
    assert type_name in reason


def test_unserialisable_value_is_refused() -> None:
    reason = refused(RequestKind.JSON_SCHEMA, {"type": "object", "default": object()})
    assert "json_schema" in reason


def test_long_reasons_are_cut() -> None:
    error = InvalidGrammarError("x" * 10_000)
    assert len(str(error)) <= MAX_REASON_CHARS
    assert str(error).endswith("...")


# --- describe -------------------------------------------------------------------

SECRET = "TOP_SECRET_GRAMMAR_TEXT"


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.JSON_SCHEMA, {"type": "object", "title": SECRET}),
        (RequestKind.JSON_OBJECT, None),
        (RequestKind.REGEX, SECRET + "[0-9]+"),
        (RequestKind.CHOICE, [SECRET, "no"]),
        (RequestKind.GRAMMAR, f'root ::= "{SECRET}"'),
        (
            RequestKind.STRUCTURAL_TAG,
            {"type": "structural_tag", "format": {"type": "const_string", "value": SECRET}},
        ),
    ],
)
def test_describe_never_includes_the_grammar(kind: RequestKind, source: Any) -> None:
    spec = build(kind, source)
    label = spec.describe()
    assert SECRET not in label
    assert spec.text not in label or spec.text == ""
    assert kind.value in label
    assert str(len(spec.text)) in label
