"""The two vLLM wrappers that carry a failure's reason from the engine core to the client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

import pytest
from harness.skip_policy import unavailable_here
from vllm.exceptions import (
    GenerationError,
    GracefulHTTPError,
    RetryableRequestError,
    VLLMValidationError,
)
from vllm.outputs import RequestError
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector

from grammar_guard.core.errors import CompileCrashedError
from grammar_guard.core.request.failures import FailureClass, FailureLog, encode
from grammar_guard.vllm_adapter import failure_reporting
from grammar_guard.vllm_adapter.compat import installed_release
from grammar_guard.vllm_adapter.failure_reporting import (
    FAILURES,
    raising_generate,
    reporting_update_from_output,
)

pytestmark = pytest.mark.seam
HAS_ERROR_FIELD = "error" in EngineCoreOutput.__struct_fields__
FAILURE_STATUSES = [
    (FailureClass.INVALID, VLLMValidationError, None),
    (FailureClass.TIMEOUT, GracefulHTTPError, HTTPStatus.REQUEST_TIMEOUT),
    (FailureClass.UNAVAILABLE, RetryableRequestError, HTTPStatus.SERVICE_UNAVAILABLE),
    (FailureClass.INTERNAL, GenerationError, HTTPStatus.INTERNAL_SERVER_ERROR),
]


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


@pytest.mark.parametrize(("failure", "error_type", "status"), FAILURE_STATUSES)
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
    _assert_status(info.value, status)


def _assert_status(error: BaseException, status: HTTPStatus | None) -> None:
    """The status vLLM's server answers ``error`` with (None: a 400 naming the field)."""
    if isinstance(error, GracefulHTTPError):
        assert error.http_status == status
    elif status is not None:
        assert error.status_code == status  # type: ignore[attr-defined]
    else:
        assert error.parameter == "structured_outputs"  # type: ignore[attr-defined]


def _compile_failure(request_id: str) -> EngineCoreOutput:
    """The output vLLM's scheduler sends for a request whose grammar failed to compile.

    Read from vLLM, not from the adapter's release table: where the output has
    an ``error`` field (0.33), the scheduler sets it to a validation error.
    """
    output = EngineCoreOutput(request_id, [], finish_reason=FinishReason.ERROR)
    if HAS_ERROR_FIELD:
        output.error = RequestError("validation_error", "Invalid structured outputs: x")
    return output


def _through_output_processor(output: EngineCoreOutput) -> Any:
    """What vLLM's API process queues for ``AsyncLLM.generate``; raises what generate would."""
    params = SamplingParams(max_tokens=4, detokenize=False)
    request = EngineCoreRequest(
        request_id=output.request_id,
        prompt_token_ids=[1, 2],
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=0.0,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        external_req_id=output.request_id,
    )
    processor = OutputProcessor(None, log_stats=False)
    queue = RequestOutputCollector(RequestOutputKind.CUMULATIVE, output.request_id)
    processor.add_request(request, None, queue=queue)
    processor.process_outputs([output])
    return queue.get_nowait()


@pytest.mark.parametrize(("failure", "error_type", "status"), FAILURE_STATUSES)
def test_a_compile_failure_reaches_the_client_through_vllms_output_processor(
    failure: FailureClass, error_type: type[Exception], status: HTTPStatus | None
) -> None:
    """On 0.33 the scheduler's own ``error`` (always a 400) would win if it were left set."""
    FAILURES.record("compile-failed", failure, "the grammar's compile was cut off")
    output = _compile_failure("compile-failed")
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))

    step(SimpleNamespace(requests={"compile-failed": object()}), output)

    with pytest.raises(error_type, match="the grammar's compile was cut off") as info:
        _collect([_through_output_processor(output)])
    _assert_status(info.value, status)


def test_a_compile_whose_worker_died_reaches_the_client_as_a_503_with_its_reason() -> None:
    reason = (
        "the grammar compile process died (signal 9: Killed); "
        "a retry after 30 s compiles the grammar again"
    )
    FAILURES.record_error("worker-died", CompileCrashedError(reason, retry_after_s=30.0))
    output = _compile_failure("worker-died")
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))

    step(SimpleNamespace(requests={"worker-died": object()}), output)

    with pytest.raises(RetryableRequestError) as info:
        _collect([_through_output_processor(output)])
    assert str(info.value) == reason
    _assert_status(info.value, HTTPStatus.SERVICE_UNAVAILABLE)


def test_an_error_grammar_guard_did_not_record_is_left_to_vllm() -> None:
    if not HAS_ERROR_FIELD:
        unavailable_here(f"vLLM {installed_release().name}'s outputs have no error field")
    output = _compile_failure("not-ours")
    FAILURES.record("someone-else", FailureClass.TIMEOUT, "pending")
    step = reporting_update_from_output(lambda self, *args: _step_outputs(*args))

    step(SimpleNamespace(requests={"someone-else": object()}), output)

    assert output.error is not None
    with pytest.raises(VLLMValidationError, match="Invalid structured outputs: x"):
        _through_output_processor(output)
    assert FAILURES.take("someone-else") is not None


def test_other_outputs_pass_through_unchanged_and_vllms_generator_is_closed() -> None:
    outputs = [
        _request_output(_completion(None), finished=False),
        _request_output(_completion("error", None)),  # vLLM's own bare error stays its own
        _request_output(_completion("stop", "grammar-guard is not a failure here")),
    ]
    seen, closed = _collect(outputs)
    assert seen == outputs
    assert closed
