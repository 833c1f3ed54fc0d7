"""GuardedGrammar: the guard as vLLM's per-request grammar, reporting the way vLLM needs.

The guard's own rules (never raise, fault isolation, validate, rollback) are
tested on :class:`~grammar_guard.core.masks.guard.GuardedMatcher` in
test_guarded_matcher.py; here is what the vLLM wrapper adds: an ended
request's reason reaches its client through ``FAILURES`` and the operator
through the log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
import torch
from test_guarded_matcher import RaisingMatcher
from vllm.v1.structured_output.backend_types import StructuredOutputGrammar

from grammar_guard.core.request.failures import FailureClass, decode
from grammar_guard.core.request.spec import RequestKind
from grammar_guard.vllm_adapter.backend import GuardedGrammar
from grammar_guard.vllm_adapter.failure_reporting import FAILURES

if TYPE_CHECKING:
    from conftest import SmallTokenizer

ERRORS_OF_THE_BACKEND = ("grammar_guard.vllm_adapter.backend", logging.ERROR)


def reported(request_id: str) -> tuple[FailureClass, str]:
    decoded = decode(FAILURES.take(request_id))
    assert decoded is not None, f"nothing reported for {request_id}"
    return decoded


def test_is_a_grammar_vllm_can_hold(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.REGEX, "abc|abd")
    grammar = GuardedGrammar(small.matcher(spec), spec.describe())
    assert isinstance(grammar, StructuredOutputGrammar)
    assert grammar.accept_tokens("req", small.ids("ab"))
    assert grammar.validate_tokens(small.ids("cx")) == small.ids("c")


def test_a_rejected_token_is_told_to_the_client_and_logged(
    small: SmallTokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    spec = small.spec(RequestKind.REGEX, "abc|abd")
    grammar = GuardedGrammar(small.matcher(spec), spec.describe())
    with caplog.at_level(logging.ERROR):
        assert not grammar.accept_tokens("rejecting", small.ids("ax"))
    message = f"grammar regex(7 chars): the grammar rejected sampled token {small.id('x')}"
    # The request's client is told which token was refused, as a server error.
    assert reported("rejecting") == (FailureClass.INTERNAL, message)
    assert caplog.record_tuples == [
        (*ERRORS_OF_THE_BACKEND, f"Ending request rejecting: {message}")
    ]


def test_a_fault_is_logged_and_ends_the_request_at_its_next_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grammar = GuardedGrammar(RaisingMatcher("fill_bitmask"), "test")
    mask = torch.zeros((1, 2), dtype=torch.int32)
    with caplog.at_level(logging.ERROR):
        grammar.fill_bitmask(mask, 0)
        fault = "fill_bitmask raised NativeCrash: fill_bitmask crashed in native code"
        assert grammar.fault == fault
        assert bool((mask[0] == -1).all())
        assert grammar.accept_tokens("req", [1]) is False
    message = f"grammar test: its grammar failed earlier: {fault}"
    assert reported("req") == (FailureClass.INTERNAL, message)
    assert caplog.record_tuples == [
        (*ERRORS_OF_THE_BACKEND, f"Grammar test failed in {fault}; its request will be ended"),
        (*ERRORS_OF_THE_BACKEND, f"Ending request req: {message}"),
    ]
