"""Validation on the API server path: in threads, within a budget, never on the event loop."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams, StructuredOutputsParams

import grammar_guard
from grammar_guard.core.engines.xgrammar import rewrite as xgrammar_rewrite
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS
from grammar_guard.core.request.validation_lanes import BoundedLanes, LaneSizes
from grammar_guard.vllm_adapter import frontend

grammar_guard.register()

MODEL = SimpleNamespace(is_diffusion=False)
TOKENIZER = object()
GUARD = StructuredOutputsConfig(backend="grammar-guard", disable_any_whitespace=True)
VLLM_CONFIG = SimpleNamespace(structured_outputs_config=GUARD)
BUDGET_S = 0.2
# How often the loop's own task must get to run while a request is judged:
# far above a scheduling hiccup, far below the seconds a blocked loop shows.
LOOP_TICK_BOUND_S = 0.15


@pytest.fixture(autouse=True)
def short_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_VALIDATION_BUDGET_S", str(BUDGET_S))


@pytest.fixture
def slow_parser(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """xgrammar's check blocks until released, as a pathological input would (GIL released)."""
    release = threading.Event()
    original = xgrammar_rewrite.check

    def check(spec: Any, **kwargs: Any) -> Any:
        release.wait()
        return original(spec, **kwargs)

    monkeypatch.setattr(xgrammar_rewrite, "check", check)
    yield release
    release.set()


def _params(**constraint: Any) -> SamplingParams:
    return SamplingParams(structured_outputs=StructuredOutputsParams(**constraint))


async def _validate_while_ticking(params: SamplingParams) -> tuple[BaseException | None, float]:
    """Run the off-loop validation; its error (or None) and the loop's longest pause meanwhile."""
    longest = 0.0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal longest
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            longest, last = max(longest, now - last), now

    ticker = asyncio.create_task(tick())
    try:
        await frontend.validate_off_loop(params, VLLM_CONFIG)  # type: ignore[arg-type]
        error = None
    except VLLMValidationError as exc:
        error = exc
    done.set()
    await ticker
    return error, longest


def test_a_slow_grammar_is_refused_at_its_budget_and_the_loop_keeps_running(
    slow_parser: threading.Event,
) -> None:
    started = time.monotonic()
    error, longest_pause = asyncio.run(_validate_while_ticking(_params(regex="slow-budget+")))
    assert error is not None and "could not be checked within 0.2 s" in str(error)
    assert time.monotonic() - started < BUDGET_S + 5.0
    assert longest_pause < LOOP_TICK_BOUND_S


def test_a_verdict_reached_after_the_budget_answers_the_retry_at_once(
    slow_parser: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    regex = "late-verdict+"
    error, _ = asyncio.run(_validate_while_ticking(_params(regex=regex)))
    assert error is not None
    slow_parser.set()
    deadline = time.monotonic() + 30.0
    while frontend._accepted.get(_spec_of(regex)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.setattr(xgrammar_rewrite, "check", _must_not_parse)
    error, _ = asyncio.run(_validate_while_ticking(_params(regex=regex)))
    assert error is None


def test_the_verdict_is_left_for_vllms_synchronous_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Large enough for the large lane, where the loop does not even build the spec.
    choices = [f"choice-{index}" for index in range(SMALL_SPEC_CHARS // 8)]
    params = _params(choice=choices)
    error, _ = asyncio.run(_validate_while_ticking(params))
    assert error is None
    monkeypatch.setattr(frontend, "spec_from_params", _must_not_parse)
    monkeypatch.setattr(frontend, "route", _must_not_parse)
    params._validate_structured_outputs(MODEL, GUARD, TOKENIZER)
    assert params.structured_outputs is not None
    assert params.structured_outputs._backend == "grammar-guard"


def test_an_invalid_grammar_is_refused_before_vllm_sees_the_request() -> None:
    error, _ = asyncio.run(_validate_while_ticking(_params(regex="(unclosed")))
    assert isinstance(error, VLLMValidationError)
    assert "Failed to transform regex into a grammar" in str(error)
    assert error.parameter == "structured_outputs"


def test_a_full_lane_is_a_400_that_says_retry(
    slow_parser: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    lanes = BoundedLanes("test-full", LaneSizes(1, 0, 1, 0))
    monkeypatch.setattr(frontend, "_lanes", lanes)
    lanes.submit(1, slow_parser.wait)  # the small lane's only place
    error, _ = asyncio.run(_validate_while_ticking(_params(regex="lane-full+")))
    assert error is not None and "retry shortly" in str(error)


def _spec_of(regex: str) -> Any:
    structured = StructuredOutputsParams(regex=regex)
    return frontend.spec_from_params(structured, frontend.compile_options(GUARD))


def _must_not_parse(*_: Any, **__: Any) -> None:
    raise AssertionError("judged again")


# A fresh interpreter, where nothing has imported the validation module yet.
CONFIG_THEN_MODULES = """
import json, sys

import grammar_guard
from vllm.config.structured_outputs import StructuredOutputsConfig

FRONTEND = "grammar_guard.vllm_adapter.frontend"
grammar_guard.register()
seen = [FRONTEND in sys.modules]
StructuredOutputsConfig(backend="xgrammar")
seen.append(FRONTEND in sys.modules)
StructuredOutputsConfig(backend="grammar-guard")
seen.append(FRONTEND in sys.modules)
print(json.dumps(seen))
"""


def test_a_config_selecting_grammar_guard_imports_validation_before_the_first_request() -> None:
    # Imported on the first request instead, the module would hold the API
    # server's event loop, and with it every client, while it loads.
    run = subprocess.run(
        [sys.executable, "-c", CONFIG_THEN_MODULES], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-4000:]
    before, after_other_backend, after_grammar_guard = json.loads(run.stdout.splitlines()[-1])
    assert (before, after_other_backend, after_grammar_guard) == (False, False, True)
