"""GuardedMatcher: one request's matcher behind a guard whose per-step methods never raise."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
import torch

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.masks.guard import GuardedMatcher
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.failures import FailureClass
from grammar_guard.core.request.spec import RequestKind

if TYPE_CHECKING:
    from conftest import SmallTokenizer
    from grammar_guard.core.engines.base import TokenMatcher


@dataclass
class Reports:
    """What a guard told its host: requests to end and faults, in order."""

    ended: list[tuple[str, str]] = field(default_factory=list)
    failures: list[FailureClass] = field(default_factory=list)
    faults: list[tuple[str, str]] = field(default_factory=list)

    def guard(self, matcher: TokenMatcher, label: str = "test") -> GuardedMatcher:
        return GuardedMatcher(
            matcher,
            label,
            end_request=self._end,
            report_fault=lambda name, fault: self.faults.append((name, fault)),
        )

    def _end(self, request_id: str, why: str, failure: FailureClass) -> None:
        self.ended.append((request_id, why))
        self.failures.append(failure)


@pytest.fixture
def reports() -> Reports:
    return Reports()


@pytest.fixture
def guarded(small: SmallTokenizer, reports: Reports) -> GuardedMatcher:
    spec = small.spec(RequestKind.REGEX, "abc|abd")
    return reports.guard(small.matcher(spec), spec.describe())


# --- (a) with a real matcher --------------------------------------------------------


def test_validate_does_not_advance_state(small: SmallTokenizer, guarded: GuardedMatcher) -> None:
    tokens = small.ids("ab")
    assert guarded.validate_tokens(tokens) == tokens
    assert guarded.validate_tokens(tokens) == tokens  # same answer twice: nothing moved
    assert guarded.accept_tokens("req", tokens)
    assert guarded.accept_tokens("req", small.ids("c"))


def test_validate_returns_the_accepted_prefix(
    small: SmallTokenizer, guarded: GuardedMatcher
) -> None:
    assert guarded.validate_tokens(small.ids("abx")) == small.ids("ab")
    assert guarded.validate_tokens(small.ids("xab")) == []
    assert guarded.validate_tokens([]) == []
    # Still at the start.
    assert not guarded.accept_tokens("req", small.ids("b"))


def test_validate_through_the_stop_token_does_not_terminate(
    small: SmallTokenizer, guarded: GuardedMatcher
) -> None:
    tokens = [*small.ids("abd"), small.eos]
    assert guarded.validate_tokens([*tokens, small.id("a")]) == tokens
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", tokens)
    assert guarded.is_terminated()


def test_rejected_token_ends_the_request_but_is_not_a_fault(
    small: SmallTokenizer, guarded: GuardedMatcher, reports: Reports
) -> None:
    assert not guarded.accept_tokens("rejecting", small.ids("ax"))
    assert guarded.fault is None and reports.faults == []
    assert reports.ended == [
        ("rejecting", f"grammar regex(7 chars): the grammar rejected sampled token {small.id('x')}")
    ]


def test_a_rejected_token_leaves_the_state_where_the_call_found_it(
    small: SmallTokenizer, guarded: GuardedMatcher
) -> None:
    # vLLM 0.34 fills more rows after a rejected draft and expects no partial advance.
    assert guarded.accept_tokens("req", small.ids("a"))
    assert not guarded.accept_tokens("req", small.ids("bx"))
    assert guarded.validate_tokens(small.ids("bd")) == small.ids("bd")
    assert guarded.accept_tokens("req", small.ids("bc"))


def test_rollback(small: SmallTokenizer, guarded: GuardedMatcher) -> None:
    assert guarded.accept_tokens("req", small.ids("abc"))
    guarded.rollback(1)
    assert guarded.accept_tokens("req", small.ids("d"))  # the other branch, after rollback
    guarded.rollback(0)  # no-op
    assert not guarded.accept_tokens("req", small.ids("d"))
    assert guarded.fault is None


def test_termination(small: SmallTokenizer, guarded: GuardedMatcher) -> None:
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    assert guarded.is_terminated()
    assert guarded.validate_tokens(small.ids("a")) == []
    assert guarded.validate_tokens([small.eos]) == []
    # Like vLLM's own backends: tokens after termination are ignored.
    assert guarded.accept_tokens("req", small.ids("x"))
    assert guarded.is_terminated()


def test_stop_token_mid_batch_terminates_and_ignores_the_rest(
    small: SmallTokenizer, guarded: GuardedMatcher
) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos, small.id("x")])
    assert guarded.is_terminated()


def test_rollback_of_the_stop_token_unterminates(
    small: SmallTokenizer, guarded: GuardedMatcher
) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    guarded.rollback(2)
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", [*small.ids("d"), small.eos])
    assert guarded.is_terminated()


def test_reset(small: SmallTokenizer, guarded: GuardedMatcher) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    guarded.reset()
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", small.ids("abd"))


def test_fill_bitmask_with_a_real_matcher(small: SmallTokenizer, guarded: GuardedMatcher) -> None:
    assert guarded.accept_tokens("req", small.ids("ab"))
    bitmask = allocate_bitmask(2, small.engine.vocab_size)
    guarded.fill_bitmask(bitmask, 1)
    words = bitmask[1].tolist()
    allowed = {t for t in range(small.engine.vocab_size) if (words[t // 32] >> (t % 32)) & 1}
    assert allowed == {small.id("c"), small.id("d")}
    assert bool((bitmask[0] == -1).all())
    assert guarded.fault is None
    assert guarded.batch_matcher() is not None


# --- (b) with a matcher that raises ------------------------------------------------


class NativeCrash(RuntimeError):
    pass


class RaisingMatcher:
    """Accepts every token; the methods named in ``failing`` raise instead."""

    def __init__(self, *failing: str) -> None:
        self.failing = set(failing)
        self.calls: list[str] = []

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failing:
            raise NativeCrash(f"{name} crashed in native code")

    def accept_token(self, token_id: int) -> bool:
        self._step("accept_token")
        return True

    def rollback(self, num_tokens: int) -> None:
        self._step("rollback")

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self._step("fill_bitmask")
        bitmask[row].zero_()

    def is_terminated(self) -> bool:
        self._step("is_terminated")
        return False

    def reset(self) -> None:
        self._step("reset")


class StopAtMatcher(RaisingMatcher):
    """Accepts every token; terminates once it has accepted ``stop``."""

    def __init__(self, stop: int) -> None:
        super().__init__()
        self.stop = stop
        self.terminated = False

    def accept_token(self, token_id: int) -> bool:
        super().accept_token(token_id)
        self.terminated = self.terminated or token_id == self.stop
        return True

    def is_terminated(self) -> bool:
        super().is_terminated()
        return self.terminated


def test_terminated_grammar_validates_nothing_even_if_the_matcher_would(
    reports: Reports,
) -> None:
    matcher = StopAtMatcher(stop=9)
    grammar = reports.guard(matcher)
    assert grammar.accept_tokens("req", [1, 9])
    assert grammar.is_terminated()
    matcher.calls.clear()
    assert grammar.validate_tokens([1, 2]) == []
    assert grammar.accept_tokens("req", [3])  # ignored after termination
    assert "accept_token" not in matcher.calls


def assert_faulted(grammar: GuardedMatcher, reports: Reports, step: str, method: str) -> None:
    fault = grammar.fault
    assert fault is not None
    assert fault.startswith(step)
    assert "NativeCrash" in fault
    assert f"{method} crashed in native code" in fault
    assert reports.faults[-1] == ("test", fault)
    assert grammar.batch_matcher() is None  # a batch fill leaves its row to fill_bitmask
    # From now on the request is ended at its next step, with the fault as its reason.
    reports.ended.clear()
    assert grammar.accept_tokens("req", [1]) is False
    assert reports.ended == [("req", f"grammar test: its grammar failed earlier: {fault}")]
    assert grammar.validate_tokens([1, 2]) == []
    mask = torch.zeros((2, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 0)
    assert bool((mask[0] == -1).all())


def test_healthy_fake_matcher_has_no_fault(reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher())
    assert grammar.accept_tokens("req", [1, 2])
    assert grammar.validate_tokens([3]) == [3]
    assert grammar.fault is None
    assert reports == Reports()


@pytest.mark.parametrize("method", ["accept_token", "is_terminated"])
def test_accept_tokens_returns_false_instead_of_raising(method: str, reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher(method))
    assert grammar.accept_tokens("req", [1, 2, 3]) is False
    assert reports.ended == [("req", f"grammar test: its grammar failed: {grammar.fault}")]
    assert_faulted(grammar, reports, "accept_tokens", method)


@pytest.mark.parametrize("method", ["accept_token", "is_terminated", "rollback"])
def test_validate_tokens_returns_empty_instead_of_raising(method: str, reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher(method))
    assert grammar.validate_tokens([1, 2, 3]) == []
    assert reports.ended == []  # a fault alone ends nothing until the request's next step
    assert_faulted(grammar, reports, "validate_tokens", method)


def test_fill_bitmask_allows_everything_instead_of_raising(reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher("fill_bitmask"))
    mask = torch.zeros((3, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 1)
    assert bool((mask[1] == -1).all())
    assert bool((mask[0] == 0).all()) and bool((mask[2] == 0).all())
    assert_faulted(grammar, reports, "fill_bitmask", "fill_bitmask")


def test_faulted_grammar_stops_calling_the_matcher(reports: Reports) -> None:
    matcher = RaisingMatcher("fill_bitmask")
    grammar = reports.guard(matcher)
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    matcher.failing.clear()
    matcher.calls.clear()
    mask = torch.zeros((1, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 0)
    grammar.rollback(1)
    assert grammar.accept_tokens("req", [1]) is False
    assert matcher.calls == []
    assert bool((mask[0] == -1).all())
    assert len(reports.faults) == 1  # reported once, when it happened


def test_rollback_does_not_raise(reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher("rollback"))
    grammar.rollback(2)
    assert_faulted(grammar, reports, "rollback", "rollback")


def test_reset_does_not_raise(reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher("reset"))
    grammar.reset()
    assert_faulted(grammar, reports, "reset", "reset")


def test_fault_survives_a_successful_reset(reports: Reports) -> None:
    grammar = reports.guard(RaisingMatcher("fill_bitmask"))
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    grammar.reset()
    assert_faulted(grammar, reports, "fill_bitmask", "fill_bitmask")


class GrammarLimitMatcher(RaisingMatcher):
    """Its fill raises the engine's own InvalidGrammarError: the grammar outgrew a limit."""

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        raise InvalidGrammarError("the grammar grew past the engine's limits")


def test_a_grammar_past_its_engine_limits_ends_as_the_clients_error(reports: Reports) -> None:
    grammar = reports.guard(GrammarLimitMatcher())
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    assert grammar.accept_tokens("req", [1]) is False
    assert reports.failures == [FailureClass.INVALID]
    assert "grew past the engine's limits" in reports.ended[0][1]


@pytest.mark.parametrize("failing", ["fill_bitmask", "accept_token"])
def test_a_crash_ends_as_a_server_fault(reports: Reports, failing: str) -> None:
    grammar = reports.guard(RaisingMatcher(failing))
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    assert grammar.accept_tokens("req", [1]) is False
    assert reports.failures == [FailureClass.INTERNAL]


def test_a_refused_sample_is_a_server_fault(small: SmallTokenizer, reports: Reports) -> None:
    grammar = reports.guard(small.matcher(small.spec(RequestKind.REGEX, "ab")))
    assert grammar.accept_tokens("req", [small.id("b")]) is False
    assert reports.failures == [FailureClass.INTERNAL]
