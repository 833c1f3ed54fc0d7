"""The compile cache on a real OpenAI-compatible server, observed through ``/metrics``.

The server runs xgrammar alone with a 2 s compile timeout, a 1 s marker TTL,
one retry and a 16 MiB cache. A schema with long bounded strings (``"maxLength": 300``) takes
several seconds to compile on this tokenizer, so it times out; small schemas
compile in milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import jsonschema
import openai
import pytest
from harness.server import GRAMMAR_GUARD_FLAGS, ApiServer, start_api_server

pytestmark = pytest.mark.engine

TIMEOUT_S = 2.0
TTL_S = 1.0
CACHE_MB = 16
WAIT_FOR_COMPILE_S = 300.0
SERVER_ENV = {
    "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(TIMEOUT_S),
    "GRAMMAR_GUARD_TIMEOUT_TTL_S": str(TTL_S),
    "GRAMMAR_GUARD_MAX_RETRIES": "1",
    "GRAMMAR_GUARD_CACHE_MB": str(CACHE_MB),
    "GRAMMAR_GUARD_COMPILE_WORKERS": "2",
    # This file proves the cache's rules with a 2 s timeout. Compile workers
    # booting (seconds, niced) would count against the first requests'
    # timeout, a known gap of process isolation that has tests of its own;
    # here compiles run in threads so only the cache's rules are measured.
    "GRAMMAR_GUARD_COMPILE_ISOLATION": "thread",
    # Routing would send the long-string schema to llguidance, which compiles
    # it in a millisecond; these rules are about slow compiles, which xgrammar
    # still has for the schemas only it enforces.
    "GRAMMAR_GUARD_ENGINE": "xgrammar",
}


def long_strings_schema(*names: str) -> dict[str, Any]:
    """Two long bounded strings: about 5 s to compile here, well past the timeout.

    Closed, as the other schemas here: in compact JSON an open object is not
    xgrammar's to serve (docs/routing.md), and the random model stays bounded.
    """
    first, second = names
    return {
        "type": "object",
        "properties": {
            first: {"type": "string", "maxLength": 300},
            second: {"type": "string", "maxLength": 301},
        },
        "required": [first, second],
        "additionalProperties": False,
    }


def small_schema(name: str, maximum: int = 99) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "integer", "minimum": 0, "maximum": maximum}},
        "required": [name],
        "additionalProperties": False,
    }


@pytest.fixture(scope="module")
def server(tiny_model: str) -> Iterator[ApiServer]:
    with start_api_server(tiny_model, *GRAMMAR_GUARD_FLAGS, env=SERVER_ENV) as running:
        yield running


Request = tuple[dict[str, Any], int]  # a schema and max_tokens


async def finished_at(request: Awaitable[Any]) -> tuple[float, Any]:
    """When the request ended, and its completion or the error it raised."""
    try:
        result = await request
    except openai.APIError as exc:
        result = exc
    return time.monotonic(), result


def send(server: ApiServer, *requests: Request) -> list[tuple[float, Any]]:
    """Send ``requests`` at once; return when each ended and what it returned."""

    async def together() -> list[tuple[float, Any]]:
        async with openai.AsyncOpenAI(
            base_url=server.base_url + "/v1", api_key="unused", max_retries=0
        ) as client:
            return await asyncio.gather(
                *(
                    finished_at(
                        client.completions.create(
                            model=server.model,
                            prompt="Answer: ",
                            max_tokens=max_tokens,
                            temperature=0,
                            extra_body={"structured_outputs": {"json": schema}},
                        )
                    )
                    for schema, max_tokens in requests
                )
            )

    return asyncio.run(together())


def send_one(server: ApiServer, schema: dict[str, Any], max_tokens: int = 24) -> Any:
    return send(server, (schema, max_tokens))[0][1]


def assert_valid(completion: Any, schema: dict[str, Any]) -> None:
    assert not isinstance(completion, Exception), completion
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice.text
    jsonschema.validate(json.loads(choice.text), schema)


def assert_timed_out(result: Any) -> None:
    """A 408 whose message says how long the compile ran, as the client sees it."""
    assert isinstance(result, openai.APIStatusError), result
    assert result.status_code == 408, result
    assert re.search(r"timed out after [\d.]+ s \([\d.]+ s queued", result.message), result


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_FOR_COMPILE_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting until {what}"
        time.sleep(0.5)


def delta(before: dict[str, float], after: dict[str, float], name: str) -> float:
    return after[f"grammar_guard_{name}"] - before[f"grammar_guard_{name}"]


def test_a_slow_compile_fails_alone_then_its_result_is_served(server: ApiServer) -> None:
    warm = small_schema("warm")
    assert_valid(send_one(server, warm), warm)
    slow = long_strings_schema("note", "memo")
    fresh = small_schema("fresh")
    before = server.settled_metrics()
    (slow_ended, slow_result), *others = send(
        server, (slow, 24), (warm, 24), (warm, 24), (warm, 24), (fresh, 24)
    )
    assert_timed_out(slow_result)
    assert f"a retry after {TTL_S:g} s may be served from the cache" in slow_result.message
    for (ended, completion), schema in zip(others, [warm, warm, warm, fresh], strict=True):
        assert_valid(completion, schema)
        assert ended < slow_ended, "a fast request waited for the slow compile"
    log = server.log_tail(200_000)
    assert re.search(r"timed out after [\d.]+ s \([\d.]+ s queued, [\d.]+ s compiling\)", log)
    assert f"a retry after {TTL_S:g} s may be served from the cache" in log

    after_timeout = server.settled_metrics()
    assert delta(before, after_timeout, "compile_timeouts_total") == 1
    assert delta(before, after_timeout, "cache_misses_total") == 2  # slow and fresh
    # The timed-out compile goes on in the background and lands in the cache.
    wait_until(
        lambda: delta(before, server.metrics(), "compiles_total") == 2,
        "the slow compile finished",
    )
    time.sleep(max(0.0, slow_ended + TTL_S - time.monotonic()))  # let the marker expire
    landed = server.settled_metrics()
    served = send_one(server, slow, max_tokens=8)
    assert served.choices[0].text.startswith('{"note":"'), served.choices[0].text
    after_hit = server.settled_metrics()
    assert delta(landed, after_hit, "cache_hits_total") == 1
    assert delta(landed, after_hit, "compiles_total") == 0
    assert delta(before, after_hit, "compile_seconds_count") == 2
    assert delta(before, after_hit, "compile_seconds_sum") >= TIMEOUT_S


def test_a_hundred_concurrent_requests_for_one_new_schema_compile_it_once(
    server: ApiServer,
) -> None:
    schema = small_schema(f"id_{uuid.uuid4().hex[:8]}")
    before = server.settled_metrics()
    for _, completion in send(server, *[(schema, 24)] * 100):
        assert_valid(completion, schema)
    after = server.settled_metrics()
    assert delta(before, after, "compiles_total") == 1
    assert delta(before, after, "cache_misses_total") == 1
    assert delta(before, after, "cache_hits_total") == 99


def test_an_invalid_schema_sent_twice_is_found_invalid_once(server: ApiServer) -> None:
    invalid = {"type": "object", "properties": {"n": {"type": "integerr"}}}
    before = server.settled_metrics()
    for _ in range(2):
        refused = send_one(server, invalid)
        assert isinstance(refused, openai.BadRequestError) and "integerr" in str(refused)
    after = server.settled_metrics()
    assert delta(before, after, "compile_errors_total") == 1
    assert delta(before, after, "compiles_total") == 0  # the engine never saw it
    valid = small_schema("after_invalid")
    assert_valid(send_one(server, valid), valid)


def test_the_cache_stays_under_its_byte_bound_while_200_schemas_pass(server: ApiServer) -> None:
    # Each of these holds about 170 KB compiled: 200 of them are twice the bound.
    schemas = [small_schema("n", maximum=100_000 + i) for i in range(200)]
    before = server.settled_metrics()
    largest_seen = 0.0
    for start in range(0, len(schemas), 20):
        for _, completion in send(server, *[(s, 4) for s in schemas[start : start + 20]]):
            assert not isinstance(completion, Exception), completion
        largest_seen = max(largest_seen, server.metrics()["grammar_guard_cache_bytes"])
    after = server.settled_metrics()
    assert 0 < largest_seen <= CACHE_MB * 2**20
    assert delta(before, after, "compiles_total") == 200
    assert delta(before, after, "evictions_total") > 0
    assert 0 < after["grammar_guard_cache_entries"] < 200


def test_a_key_that_keeps_timing_out_escalates_to_a_permanent_refusal(server: ApiServer) -> None:
    slow = long_strings_schema("story", "moral")
    before = server.settled_metrics()
    [(ended, first)] = send(server, (slow, 24))
    assert_timed_out(first)  # a 408: a retry may find it compiled
    time.sleep(max(0.0, ended + TTL_S - time.monotonic()))  # let the marker expire
    # The one retry allowed times out too, which makes the refusal permanent: the
    # retry itself is told so, with a 400 that says retrying will not help.
    retried = send_one(server, slow)
    assert isinstance(retried, openai.BadRequestError), retried
    assert re.search(r"timed out after [\d.]+ s", retried.message)
    assert "gave up after 1 retry" in retried.message
    started = time.monotonic()
    refused = send_one(server, slow)
    assert isinstance(refused, openai.BadRequestError), refused
    assert "gave up after 1 retry" in refused.message
    assert time.monotonic() - started < TIMEOUT_S  # refused at once, no third compile
    after = server.settled_metrics()
    assert delta(before, after, "cache_misses_total") == 2  # no third compile was started
    assert delta(before, after, "compile_timeouts_total") == 2
    assert delta(before, after, "escalations_total") == 1
    assert "gave up after 1 retry" in server.log_tail(200_000)
