"""Failure reasons: classified by what the client can do, encoded, read back, kept bounded."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from grammar_guard.core.errors import (
    CompileCrashedError,
    CompileTimeoutError,
    InvalidGrammarError,
)
from grammar_guard.core.request.failures import FailureClass, FailureLog, classify, decode, encode


def _timeout(*, permanent: bool) -> CompileTimeoutError:
    return CompileTimeoutError(
        "grammar compile timed out", waited_s=2.0, permanent=permanent, retry_after_s=None
    )


@pytest.mark.parametrize(
    ("error", "failure", "status"),
    [
        (InvalidGrammarError("regex allows no output at all"), FailureClass.INVALID, 400),
        (_timeout(permanent=True), FailureClass.INVALID, 400),
        (_timeout(permanent=False), FailureClass.TIMEOUT, 408),
        (RuntimeError("the grammar compiler was closed"), FailureClass.UNAVAILABLE, 503),
        (
            CompileCrashedError("the grammar compile process died (signal 9: Killed)"),
            FailureClass.UNAVAILABLE,
            503,
        ),
    ],
)
def test_each_error_gets_the_status_a_client_can_act_on(
    error: BaseException, failure: FailureClass, status: int
) -> None:
    assert classify(error) is failure
    assert failure.value == HTTPStatus(status)


@pytest.mark.parametrize("failure", list(FailureClass))
def test_an_encoded_reason_reads_back_whole(failure: FailureClass) -> None:
    message = "json_schema failed: a: b"  # ": " inside the message survives
    assert decode(encode(failure, message)) == (failure, message)


@pytest.mark.parametrize(
    "value", [None, 7, "stop", "</s>", "grammar-guard:unknown: x", "grammar-guard:invalid"]
)
def test_other_stop_reasons_are_not_taken_for_failures(value: object) -> None:
    assert decode(value) is None


def test_a_huge_message_is_cut() -> None:
    encoded = encode(FailureClass.INVALID, "x" * 100_000)
    assert len(encoded) < 500


def test_the_log_hands_each_reason_out_once_and_keeps_the_first_cause() -> None:
    log = FailureLog()
    assert not log
    log.record_error("r1", InvalidGrammarError("bad regex"))
    log.record("r1", FailureClass.INTERNAL, "a consequence")
    assert log
    assert decode(log.take("r1")) == (FailureClass.INVALID, "bad regex")
    assert log.take("r1") is None
    assert not log


def test_the_log_forgets_the_oldest_past_its_bound() -> None:
    log = FailureLog(max_entries=2)
    for request_id in ("a", "b", "c"):
        log.record(request_id, FailureClass.TIMEOUT, request_id)
    assert log.take("a") is None
    assert decode(log.take("c")) == (FailureClass.TIMEOUT, "c")


def test_the_log_forgets_requests_that_are_gone_once_their_grace_has_passed() -> None:
    now = [100.0]
    log = FailureLog(clock=lambda: now[0])
    for request_id in ("kept", "gone", "on-its-way"):
        log.record(request_id, FailureClass.INVALID, request_id)
    now[0] += 30.0
    log.record("late", FailureClass.INVALID, "late")  # recorded after the others
    now[0] += 30.0

    log.discard_unless({"kept"}.__contains__, older_than_s=60.0)

    assert log.take("gone") is None
    assert log.take("on-its-way") is None
    assert decode(log.take("late")) == (FailureClass.INVALID, "late")  # 30 s old: may arrive
    assert decode(log.take("kept")) == (FailureClass.INVALID, "kept")
