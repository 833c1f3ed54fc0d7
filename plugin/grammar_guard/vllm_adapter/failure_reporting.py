"""Tell the client why grammar-guard ended its request, with the status that fits.

vLLM ends a request whose grammar failed in the engine core (a compile error
or timeout, a grammar fault while decoding) with finish reason ``error`` and
nothing else; its server answers every such request with a bare HTTP 500.
Two wrappers close that gap, both passing other traffic through untouched:

- in the engine core, ``Scheduler.update_from_output`` writes the failure
  the backend recorded for the request (:data:`FAILURES`) into the output's
  ``stop_reason``, a field vLLM already carries to the API process (and which
  offline ``LLM`` users see as it is). vLLM 0.33 and 0.34 also put a compile failure
  on the output's ``error``, which its API process raises as a 400 before
  ``generate`` yields the output; for a failure grammar-guard recorded that
  field is cleared, so the reason travels one way on every release and
  keeps its own status;
- in the API process, ``AsyncLLM.generate`` raises the matching vLLM error
  when a finished output carries such a reason, so the server answers 400,
  408, 503 or 500 with the reason as the message (see
  :class:`grammar_guard.core.request.failures.FailureClass`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from vllm.exceptions import (
    GenerationError,
    GracefulHTTPError,
    RetryableRequestError,
    VLLMError,
    VLLMValidationError,
)
from vllm.v1.engine import FinishReason

from grammar_guard.core.request.failures import FailureClass, FailureLog, decode
from grammar_guard.vllm_adapter.compat import installed_release

# One per engine-core process: the backend records, the scheduler wrapper takes.
FAILURES = FailureLog()
# vLLM starts a request's compile in the engine core's input thread, before
# the main thread hands the request to the scheduler: a failure recorded for
# a request the scheduler does not hold yet may still get its error output.
# One engine step is the usual gap; a minute leaves room for a stalled one.
STRAY_AFTER_S = 60.0


def reporting_update_from_output(original: Callable[..., Any]) -> Callable[..., Any]:
    clears_error = installed_release().failure_error_field

    def update_from_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        outputs = original(self, *args, **kwargs)
        if FAILURES:
            for client_outputs in outputs.values():
                for output in client_outputs.outputs:
                    if output.finish_reason is FinishReason.ERROR and output.stop_reason is None:
                        _attach_failure(output, clears_error)
            # A request aborted while its compile failed never gets an error
            # output; dropping its entry keeps the log empty, and this loop
            # off the engine's per-step path, once no failure is pending.
            FAILURES.discard_unless(self.requests.__contains__, older_than_s=STRAY_AFTER_S)
        return outputs

    return update_from_output


def _attach_failure(output: Any, clear_error: bool) -> None:
    output.stop_reason = FAILURES.take(output.request_id)
    if clear_error and output.stop_reason is not None:
        # Left set, it would reach the client as a 400 whatever the failure.
        output.error = None


def raising_generate(original: Callable[..., Any]) -> Callable[..., Any]:
    async def generate(self: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        # aclosing: a client that goes away closes vLLM's generator at once,
        # which aborts the request in the engine.
        async with contextlib.aclosing(original(self, *args, **kwargs)) as outputs:
            async for output in outputs:
                if output.finished:
                    raise_reported_failure(output)
                yield output

    return generate


def raise_reported_failure(output: Any) -> None:
    """Raise the error a grammar-guard failure in ``output`` stands for, if it has one."""
    for completion in output.outputs:
        if completion.finish_reason != "error":
            continue
        reported = decode(completion.stop_reason)
        if reported is not None:
            raise client_error(*reported)


def client_error(failure: FailureClass, message: str) -> VLLMError:
    if failure is FailureClass.INVALID:
        return VLLMValidationError(message, parameter="structured_outputs")
    if failure is FailureClass.TIMEOUT:
        return GracefulHTTPError(message, failure.value)
    if failure is FailureClass.UNAVAILABLE:
        return RetryableRequestError(message)
    return GenerationError(message)
