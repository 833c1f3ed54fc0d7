"""The two vLLM wrappers that carry a failure's reason from the engine core to the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.exceptions import (
    GenerationError,
    GracefulHTTPError,
    RetryableRequestError,
    VLLMValidationError,
)
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason

from grammar_guard.core.failures import FailureClass, FailureLog, encode
from grammar_guard.vllm_adapter import failure_reporting
from grammar_guard.vllm_adapter.failure_reporting import (
    FAILURES,
    raising_generate,
    reporting_update_from_output,
)


def _step_outputs(*outputs: EngineCoreOutput) -> dict[int, EngineCoreOutputs]:
    return {0: EngineCoreOutputs(outputs=list(outputs))}


def test_the_recorded_reason_goes_into_the_failed_requests_output_only() -> None:
    failed = EngineCoreOutput("failed", [], finish_reason=FinishReason.ERROR)
    stopped = EngineCoreOutput("stopped", [5], finish_reason=FinishReason.STOP, stop_reason=7)
    running = EngineCoreOutput("running", [6])
    other_error = EngineCoreOutput("kv-load-failed", [], finish_reason=FinishReason.ERROR)
    FAILURES.record("failed", FailureClass.INVALID, "regex allows no output at all")
    FAILURES.record("stopped", FailureClass.INTERNAL, "never delivered")
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))

    step(SimpleNamespace(requests={"running": object()}), failed, stopped, running, other_error)

    assert failed.stop_reason == encode(FailureClass.INVALID, "regex allows no output at all")
    assert stopped.stop_reason == 7  # a normal finish keeps its own reason
    assert running.stop_reason is None
    assert other_error.stop_reason is None  # not grammar-guard's failure: vLLM's bare error
    assert FAILURES.take("failed") is None  # handed out once


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The engine-core failure log, replaced by one on a clock the test moves."""
    now = [1000.0]
    monkeypatch.setattr(failure_reporting, "FAILURES", FailureLog(clock=lambda: now[0]))
    return now


def test_a_failure_recorded_before_the_scheduler_holds_its_request_still_reaches_it(
    clock: list[float],
) -> None:
    # vLLM compiles from the engine core's input thread: a compile can fail
    # while a step runs, before the main thread adds the request.
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))
    failure_reporting.FAILURES.record("early", FailureClass.INVALID, "allows no output at all")
    step(SimpleNamespace(requests={}))
    clock[0] += 1.0
    failed = EngineCoreOutput("early", [], finish_reason=FinishReason.ERROR)

    step(SimpleNamespace(requests={"early": object()}), failed)

    assert failed.stop_reason == encode(FailureClass.INVALID, "allows no output at all")


def test_failures_of_requests_the_scheduler_no_longer_holds_are_forgotten(
    clock: list[float],
) -> None:
    # "waiting" still waits for its error output; "aborted" went away before it.
    failures = failure_reporting.FAILURES
    failures.record("waiting", FailureClass.TIMEOUT, "timed out")
    failures.record("aborted", FailureClass.TIMEOUT, "timed out")
    clock[0] += failure_reporting.STRAY_AFTER_S
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))

    step(SimpleNamespace(requests={"waiting": object()}))

    assert failures.take("aborted") is None
    assert failures.take("waiting") == encode(FailureClass.TIMEOUT, "timed out")
    assert not failures


def _request_output(*completions: SimpleNamespace, finished: bool = True) -> SimpleNamespace:
    return SimpleNamespace(finished=finished, outputs=list(completions))


def _completion(finish_reason: str | None, stop_reason: object = None) -> SimpleNamespace:
    return SimpleNamespace(finish_reason=finish_reason, stop_reason=stop_reason)


def _collect(outputs: list[SimpleNamespace]) -> tuple[list[Any], bool]:
    """What the wrapped generator yields for ``outputs``, and whether vLLM's was closed."""
    closed = []

    async def vllm_generate(self: Any) -> AsyncGenerator[SimpleNamespace, None]:
        try:
            for output in outputs:
                yield output
        finally:
            closed.append(True)

    async def consume() -> list[Any]:
        return [output async for output in raising_generate(vllm_generate)(None)]

    return asyncio.run(consume()), bool(closed)


@pytest.mark.parametrize(
    ("failure", "error_type", "status"),
    [
        (FailureClass.INVALID, VLLMValidationError, None),
        (FailureClass.TIMEOUT, GracefulHTTPError, HTTPStatus.REQUEST_TIMEOUT),
        (FailureClass.UNAVAILABLE, RetryableRequestError, HTTPStatus.SERVICE_UNAVAILABLE),
        (FailureClass.INTERNAL, GenerationError, HTTPStatus.INTERNAL_SERVER_ERROR),
    ],
)
def test_a_reported_failure_becomes_the_matching_vllm_error(
    failure: FailureClass, error_type: type[Exception], status: HTTPStatus | None
) -> None:
    reason = "grammar compile timed out (2 s limit)"
    outputs = [
        _request_output(_completion(None), finished=False),
        _request_output(_completion("error", encode(failure, reason))),
    ]
    with pytest.raises(error_type, match=r"grammar compile timed out \(2 s limit\)") as info:
        _collect(outputs)
    error = info.value
    if isinstance(error, GracefulHTTPError):
        assert error.http_status == status
    elif status is not None:
        assert error.status_code == status  # type: ignore[attr-defined]
    else:
        assert error.parameter == "structured_outputs"  # type: ignore[attr-defined]


def test_other_outputs_pass_through_unchanged_and_vllms_generator_is_closed() -> None:
    outputs = [
        _request_output(_completion(None), finished=False),
        _request_output(_completion("error", None)),  # vLLM's own bare error stays its own
        _request_output(_completion("stop", "grammar-guard is not a failure here")),
    ]
    seen, closed = _collect(outputs)
    assert seen == outputs
    assert closed
