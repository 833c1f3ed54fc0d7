"""Cases whose request fields have the wrong type or shape.

structured_outputs, response_format, tools and tool_choice, and a stream
of each kind of answer.
"""

from __future__ import annotations

import json
from typing import Any

from harness.bad_input.builders import (
    NAMED_TOOL,
    WEATHER,
    chat,
    completion,
    constrained,
    function_tools,
    refused,
)
from harness.bad_input.case import CHAT, Case, json_output, regex_output, tool_call_output

NOT_A_STRING = "Input should be a valid string"  # pydantic's message for a wrong type


def _wrong_types() -> list[Case]:
    not_string = NOT_A_STRING
    return [
        refused("so-json-number", completion({"json": 5}), not_string),
        refused("so-json-list", completion({"json": [{"type": "string"}]}), "valid dictionary"),
        refused("so-regex-number", completion({"regex": 5}), not_string),
        refused("so-regex-list", completion({"regex": ["a"]}), not_string),
        refused("so-choice-string", completion({"choice": "yes"}), "Input should be a valid list"),
        refused("so-choice-numbers", completion({"choice": [1, 2]}), not_string),
        refused("so-choice-null-item", completion({"choice": ["a", None]}), not_string),
        refused("so-choice-nested-list", completion({"choice": [["a"]]}), not_string),
        refused("so-choice-empty", completion({"choice": []}), "choice must be a non-empty list"),
        refused("so-grammar-number", completion({"grammar": 5}), not_string),
        refused("so-grammar-object", completion({"grammar": {"root": "a"}}), not_string),
        refused("so-json-object-number", completion({"json_object": 2}), "valid boolean"),
        refused(
            "so-structural-tag-number",
            completion({"structural_tag": 5}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-object",
            completion({"structural_tag": {"type": "structural_tag"}}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-not-json",
            completion({"structural_tag": "{"}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-unknown-format",
            completion(
                {
                    "structural_tag": json.dumps(
                        {"type": "structural_tag", "format": {"type": "nope"}}
                    )
                }
            ),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-legacy-incomplete",
            completion(
                {
                    "structural_tag": json.dumps(
                        {"structures": [{"begin": "<a>"}], "triggers": ["<a"]}
                    )
                }
            ),
            "structural_tag specification",
        ),
        refused(
            "so-whitespace-pattern-number",
            completion({"json": {"type": "object"}, "whitespace_pattern": 5}),
            not_string,
        ),
        refused(
            "so-disable-any-whitespace-string",
            completion({"json": {"type": "object"}, "disable_any_whitespace": "maybe"}),
            "valid boolean",
        ),
        refused(
            "so-two-constraints",
            completion({"json": {"type": "object"}, "regex": "a"}),
            "only use one kind",
        ),
        refused("so-no-constraint", completion({}), "none are specified"),
        refused("so-string", completion("json"), "must be an object"),
        refused("so-list", completion([]), "must be an object"),
        refused("so-number", completion(5), "must be an object"),
        refused("so-string-chat", chat(structured_outputs="json"), "must be an object", CHAT),
        # pydantic reads "yes" as true: a valid request.
        constrained(
            "so-json-object-yes",
            completion({"json_object": "yes"}),
            json_output({"type": "object"}),
        ),
    ]


def _response_formats() -> list[Case]:
    def chat_refused(name: str, response_format: Any, reason: str) -> Case:
        return refused(name, chat(response_format=response_format), reason, CHAT)

    return [
        chat_refused("rf-unknown-type", {"type": "json_schemax"}, "Input should be"),
        chat_refused("rf-not-an-object", "json", "valid dictionary"),
        chat_refused(
            "rf-json-schema-missing",
            {"type": "json_schema"},
            "'json_schema' field must be provided",
        ),
        chat_refused(
            "rf-json-schema-is-a-list",
            {"type": "json_schema", "json_schema": [1]},
            "valid dictionary",
        ),
        chat_refused(
            "rf-schema-is-a-string",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": "{"}},
            "valid dictionary",
        ),
        chat_refused(
            "rf-name-is-a-number",
            {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}},
            NOT_A_STRING,
        ),
        chat_refused(
            "rf-invalid-schema",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}},
            'Unsupported type "objectx"',
        ),
        chat_refused(
            "rf-structural-tag-unknown-format",
            {"type": "structural_tag", "format": {"type": "nope"}},
            "structural_tag specification",
        ),
        constrained(
            "rf-json-object-with-an-extra-field",
            chat(response_format={"type": "json_object", "extra": 1}),
            json_output({"type": "object"}),
            CHAT,
        ),
    ]


def _tools() -> list[Case]:
    def tools_refused(name: str, reason: str, **fields: Any) -> Case:
        return refused(name, chat(**fields), reason, CHAT)

    return [
        tools_refused(
            "tools-not-a-list", "valid list", tools={"type": "function"}, tool_choice="required"
        ),
        tools_refused(
            "tool-without-function",
            "Field required",
            tools=[{"type": "function"}],
            tool_choice="required",
        ),
        tools_refused(
            "tool-name-is-a-number",
            NOT_A_STRING,
            tools=function_tools(WEATHER, name=5),
            tool_choice="required",
        ),
        tools_refused(
            "tool-parameters-a-string",
            "valid dictionary",
            tools=function_tools("{"),
            tool_choice="required",
        ),
        tools_refused(
            "tool-parameters-invalid-schema",
            'Unsupported type "objectx"',
            tools=function_tools({"type": "objectx"}),
            tool_choice="required",
        ),
        tools_refused(
            "named-tool-parameters-invalid-schema",
            'Unsupported type "objectx"',
            tools=function_tools({"type": "objectx"}),
            tool_choice=NAMED_TOOL,
        ),
        tools_refused(
            "tool-choice-a-number",
            "Invalid value for `tool_choice`",
            tools=function_tools(WEATHER),
            tool_choice=5,
        ),
        tools_refused(
            "tool-choice-unknown-tool",
            "does not match any of the specified `tools`",
            tools=function_tools(WEATHER),
            tool_choice={"type": "function", "function": {"name": "nope"}},
        ),
        constrained(
            "tool-choice-required",
            chat(
                max_tokens=96,
                tools=function_tools(WEATHER),
                tool_choice="required",
                parallel_tool_calls=False,
            ),
            tool_call_output("get_weather", WEATHER),
            CHAT,
        ),
        constrained(
            "tool-choice-named",
            chat(max_tokens=96, tools=function_tools(WEATHER), tool_choice=NAMED_TOOL),
            tool_call_output("get_weather", WEATHER),
            CHAT,
        ),
    ]


def _streams() -> list[Case]:
    return [
        refused("stream-invalid-regex", completion({"regex": "[a-"}, stream=True), "Unclosed '['"),
        constrained(
            "stream-valid-regex",
            completion({"regex": "[a-c]{1,5}"}, stream=True),
            regex_output("[a-c]{1,5}"),
        ),
    ]


FIELD_CASES: tuple[Case, ...] = (
    *_wrong_types(),
    *_response_formats(),
    *_tools(),
    *_streams(),
)
