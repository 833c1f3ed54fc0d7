"""vLLM request forms become the same GrammarSpec in the API process and the engine core."""

from __future__ import annotations

import json
from typing import Any

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
from vllm.v1.structured_output.request import get_structured_output_key

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.vllm_adapter.request_spec import compile_options, spec_from_key, spec_from_params

pytestmark = pytest.mark.seam
COMPACT = CompileOptions(any_whitespace=False)
DEFAULT = CompileOptions()

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
TAG = json.dumps(
    {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": "<a>",
            "content": {"type": "json_schema", "json_schema": {"type": "integer"}},
            "end": "</a>",
        },
    }
)

REQUESTS: list[tuple[str, dict[str, Any], RequestKind]] = [
    ("json-dict", {"json": SCHEMA}, RequestKind.JSON_SCHEMA),
    ("json-text", {"json": json.dumps(SCHEMA, indent=2)}, RequestKind.JSON_SCHEMA),
    ("json-object", {"json_object": True}, RequestKind.JSON_OBJECT),
    ("regex", {"regex": "[a-z]+@[a-z]+"}, RequestKind.REGEX),
    ("choice", {"choice": ["yes", "no", 'say "hi"']}, RequestKind.CHOICE),
    ("grammar", {"grammar": 'root ::= "a" | "b"'}, RequestKind.GRAMMAR),
    ("structural-tag", {"structural_tag": TAG}, RequestKind.STRUCTURAL_TAG),
]


@pytest.mark.parametrize(
    ("fields", "kind"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS]
)
def test_each_field_gives_its_kind(fields: dict[str, Any], kind: RequestKind) -> None:
    spec = spec_from_params(StructuredOutputsParams(**fields), DEFAULT)
    assert spec.kind is kind


def test_fields_keep_their_content() -> None:
    assert spec_from_params(StructuredOutputsParams(regex="a+b"), DEFAULT).text == "a+b"
    choice = spec_from_params(StructuredOutputsParams(choice=["x", "y"]), DEFAULT)
    assert json.loads(choice.text) == ["x", "y"]
    schema = spec_from_params(StructuredOutputsParams(json=SCHEMA), DEFAULT)
    assert json.loads(schema.text) == SCHEMA
    assert list(json.loads(schema.text)["properties"]) == ["name", "age"]


def test_json_dict_and_text_with_other_whitespace_are_one_spec() -> None:
    from_dict = spec_from_params(StructuredOutputsParams(json=SCHEMA), DEFAULT)
    loose = json.dumps(SCHEMA, indent=4).replace(":", " :  ")
    from_text = spec_from_params(StructuredOutputsParams(json=loose), DEFAULT)
    assert from_dict == from_text
    assert hash(from_dict) == hash(from_text)


@pytest.mark.parametrize(
    ("fields", "kind"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS]
)
@pytest.mark.parametrize("options", [DEFAULT, COMPACT], ids=["default", "compact"])
def test_engine_key_gives_the_same_spec_as_the_request(
    fields: dict[str, Any], kind: RequestKind, options: CompileOptions
) -> None:
    params = StructuredOutputsParams(**fields)
    option, text = get_structured_output_key(params)  # what the engine core receives
    assert isinstance(option, StructuredOutputOptions)
    from_key = spec_from_key(option, text, options)
    assert from_key == spec_from_params(params, options)
    assert from_key.kind is kind


@pytest.mark.parametrize(
    ("option", "kind"),
    [
        (StructuredOutputOptions.JSON, RequestKind.JSON_SCHEMA),
        (StructuredOutputOptions.JSON_OBJECT, RequestKind.JSON_OBJECT),
        (StructuredOutputOptions.REGEX, RequestKind.REGEX),
        (StructuredOutputOptions.CHOICE, RequestKind.CHOICE),
        (StructuredOutputOptions.GRAMMAR, RequestKind.GRAMMAR),
        (StructuredOutputOptions.STRUCTURAL_TAG, RequestKind.STRUCTURAL_TAG),
    ],
)
def test_every_vllm_option_is_mapped(option: StructuredOutputOptions, kind: RequestKind) -> None:
    text = {
        RequestKind.JSON_SCHEMA: "{}",
        RequestKind.JSON_OBJECT: "",
        RequestKind.REGEX: "a",
        RequestKind.CHOICE: '["a"]',
        RequestKind.GRAMMAR: 'root ::= "a"',
        RequestKind.STRUCTURAL_TAG: TAG,
    }[kind]
    assert spec_from_key(option, text, DEFAULT) == GrammarSpec.build(kind, text, DEFAULT)


def test_bad_request_input_is_invalid_grammar() -> None:
    with pytest.raises(InvalidGrammarError, match="json_schema"):
        spec_from_params(StructuredOutputsParams(json='{"type": '), DEFAULT)
    with pytest.raises(InvalidGrammarError, match="choice"):
        spec_from_params(StructuredOutputsParams(choice=[]), DEFAULT)
    with pytest.raises(InvalidGrammarError, match="U\\+0000"):
        spec_from_params(StructuredOutputsParams(regex="a\x00"), DEFAULT)


def test_deep_json_dict_is_refused_without_recursion() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(10_000):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(InvalidGrammarError, match="levels"):
        spec_from_params(StructuredOutputsParams(json=deep), DEFAULT)


def test_disable_any_whitespace_means_compact() -> None:
    config = StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True)
    assert compile_options(config).any_whitespace is False
    assert compile_options(StructuredOutputsConfig(backend="xgrammar")).any_whitespace is True


def test_objects_are_open_unless_the_setting_or_vllm_s_flag_closes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GRAMMAR_GUARD_OBJECTS", raising=False)
    config = StructuredOutputsConfig(backend="grammar-guard", disable_any_whitespace=True)
    options = compile_options(config)
    assert options == CompileOptions(any_whitespace=False, open_objects=True)
    flagged = StructuredOutputsConfig(
        backend="grammar-guard", disable_any_whitespace=True, disable_additional_properties=True
    )
    assert compile_options(flagged) == COMPACT
    # A key of its own: a grammar compiled closed is never served open.
    opened = spec_from_params(StructuredOutputsParams(json=SCHEMA), options)
    assert opened != spec_from_params(StructuredOutputsParams(json=SCHEMA), COMPACT)
    # Read for every key, so both processes of a server agree.
    monkeypatch.setenv("GRAMMAR_GUARD_OBJECTS", "closed")
    assert compile_options(config) == COMPACT


def test_compact_config_reaches_json_specs_only() -> None:
    options = compile_options(
        StructuredOutputsConfig(backend="xgrammar", disable_any_whitespace=True)
    )
    json_spec = spec_from_params(StructuredOutputsParams(json=SCHEMA), options)
    assert json_spec.options.any_whitespace is False
    assert json_spec != spec_from_params(StructuredOutputsParams(json=SCHEMA), DEFAULT)
    regex_spec = spec_from_params(StructuredOutputsParams(regex="a+"), options)
    assert regex_spec == spec_from_params(StructuredOutputsParams(regex="a+"), DEFAULT)


def test_a_dict_whose_keys_collide_once_written_as_json_is_refused() -> None:
    # Written as JSON, both keys are "1": the engine would compile the last
    # member only, not the document the API process validated.
    clash = {"type": "object", "properties": {1: {"type": "integer"}, "1": {"type": "string"}}}
    with pytest.raises(InvalidGrammarError, match="object key of type int"):
        spec_from_params(StructuredOutputsParams(json=clash), DEFAULT)
