"""The plugin behind vLLM's OpenAI-compatible server, driven by the ``openai`` client."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest
from harness.oracles import assert_satisfies, assert_valid_prefix
from harness.server import ApiServer

from grammar_guard.demo.cases import CASES, PERSON_SCHEMA, Case

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def client(api_server: ApiServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=api_server.base_url + "/v1", api_key="unused", max_retries=0)


def _complete(
    client: openai.OpenAI, model: str, structured_outputs: dict[str, Any], seed: int
) -> Any:
    return client.completions.create(
        model=model,
        prompt="Answer: ",
        max_tokens=64,
        seed=seed,
        extra_body={"structured_outputs": structured_outputs},
    ).choices[0]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_structured_outputs_extra_body(
    client: openai.OpenAI, api_server: ApiServer, case: Case
) -> None:
    for seed in (1, 2):
        choice = _complete(client, api_server.model, case.structured_outputs, seed)
        assert_satisfies(case, choice.text, choice.finish_reason, compact=True)


def test_chat_response_format_json_schema(client: openai.OpenAI, api_server: ApiServer) -> None:
    for seed in (1, 2, 3):
        response = client.chat.completions.create(
            model=api_server.model,
            messages=[{"role": "user", "content": "Describe a user."}],
            max_tokens=64,
            seed=seed,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True},
            },
        )
        message = response.choices[0].message.content
        assert response.choices[0].finish_reason == "stop", message
        jsonschema.validate(json.loads(message), PERSON_SCHEMA)


def test_chat_response_format_json_object(client: openai.OpenAI, api_server: ApiServer) -> None:
    response = client.chat.completions.create(
        model=api_server.model,
        messages=[{"role": "user", "content": "Any JSON object."}],
        max_tokens=48,
        seed=5,
        response_format={"type": "json_object"},
    )
    choice = response.choices[0]
    if choice.finish_reason == "stop":
        assert isinstance(json.loads(choice.message.content), dict)
    else:
        assert_valid_prefix({"json_object": True}, choice.message.content, compact=True)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"enum": ["Oslo", "Lima", "Pune"]},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def test_tool_choice_required_yields_valid_tool_calls(
    client: openai.OpenAI, api_server: ApiServer
) -> None:
    response = client.chat.completions.create(
        model=api_server.model,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        max_tokens=96,
        seed=4,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    calls = response.choices[0].message.tool_calls
    assert calls and len(calls) == 1
    assert calls[0].function.name == "get_weather"
    jsonschema.validate(
        json.loads(calls[0].function.arguments), WEATHER_TOOL["function"]["parameters"]
    )


BAD_BODIES = [
    pytest.param({"json": {"type": "objectx"}}, "objectx", id="unknown-type"),
    pytest.param({"regex": "[a-"}, "regex", id="bad-regex"),
    pytest.param({"grammar": "root ::= nothing_here"}, "nothing_here", id="bad-ebnf"),
    pytest.param({"json": "{not json"}, "not valid JSON", id="malformed-json"),
]


@pytest.mark.parametrize(("structured_outputs", "reason"), BAD_BODIES)
def test_bad_input_gets_a_400_with_the_reason_then_good_requests_succeed(
    client: openai.OpenAI, api_server: ApiServer, structured_outputs: dict[str, Any], reason: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        _complete(client, api_server.model, structured_outputs, seed=0)
    assert refused.value.status_code == 400
    assert reason in str(refused.value)
    good = _complete(client, api_server.model, CASES[2].structured_outputs, seed=0)
    assert_satisfies(CASES[2], good.text, good.finish_reason, compact=True)


def test_bad_response_format_schema_gets_a_400(
    client: openai.OpenAI, api_server: ApiServer
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=api_server.model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            response_format={
                "type": "json_schema",
                "json_schema": {
                    "name": "x",
                    "schema": {"type": "object", "properties": {"a": {"type": 5}}},
                },
            },
        )
    assert refused.value.status_code == 400
    assert "json_schema" in str(refused.value)
