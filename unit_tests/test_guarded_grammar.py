"""GuardedGrammar: vLLM's per-request grammar object, whose per-step methods never raise."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import torch

from grammar_guard.core.bitmask import allocate_bitmask
from grammar_guard.core.failures import FailureClass, decode
from grammar_guard.core.spec import RequestKind
from grammar_guard.vllm_adapter.backend import GuardedGrammar
from grammar_guard.vllm_adapter.failure_reporting import FAILURES

if TYPE_CHECKING:
    from conftest import SmallTokenizer


@pytest.fixture
def guarded(small: SmallTokenizer) -> GuardedGrammar:
    spec = small.spec(RequestKind.REGEX, "abc|abd")
    return GuardedGrammar(small.matcher(spec), spec.describe())


def reported(request_id: str) -> tuple[FailureClass, str]:
    decoded = decode(FAILURES.take(request_id))
    assert decoded is not None, f"nothing reported for {request_id}"
    return decoded


# --- (a) with a real matcher --------------------------------------------------------


def test_validate_does_not_advance_state(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    tokens = small.ids("ab")
    assert guarded.validate_tokens(tokens) == tokens
    assert guarded.validate_tokens(tokens) == tokens  # same answer twice: nothing moved
    assert guarded.accept_tokens("req", tokens)
    assert guarded.accept_tokens("req", small.ids("c"))


def test_validate_returns_the_accepted_prefix(
    small: SmallTokenizer, guarded: GuardedGrammar
) -> None:
    assert guarded.validate_tokens(small.ids("abx")) == small.ids("ab")
    assert guarded.validate_tokens(small.ids("xab")) == []
    assert guarded.validate_tokens([]) == []
    # Still at the start.
    assert not guarded.accept_tokens("req", small.ids("b"))


def test_validate_through_the_stop_token_does_not_terminate(
    small: SmallTokenizer, guarded: GuardedGrammar
) -> None:
    tokens = [*small.ids("abd"), small.eos]
    assert guarded.validate_tokens([*tokens, small.id("a")]) == tokens
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", tokens)
    assert guarded.is_terminated()


def test_rejected_token_is_not_a_fault(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    assert not guarded.accept_tokens("rejecting", small.ids("ax"))
    assert guarded.fault is None
    # The request's client is told which token was refused, as a server error.
    failure, message = reported("rejecting")
    assert failure is FailureClass.INTERNAL
    assert f"rejected sampled token {small.id('x')}" in message


def test_rollback(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    assert guarded.accept_tokens("req", small.ids("abc"))
    guarded.rollback(1)
    assert guarded.accept_tokens("req", small.ids("d"))  # the other branch, after rollback
    guarded.rollback(0)  # no-op
    assert not guarded.accept_tokens("req", small.ids("d"))
    assert guarded.fault is None


def test_termination(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    assert guarded.is_terminated()
    assert guarded.validate_tokens(small.ids("a")) == []
    assert guarded.validate_tokens([small.eos]) == []
    # Like vLLM's own backends: tokens after termination are ignored.
    assert guarded.accept_tokens("req", small.ids("x"))
    assert guarded.is_terminated()


def test_stop_token_mid_batch_terminates_and_ignores_the_rest(
    small: SmallTokenizer, guarded: GuardedGrammar
) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos, small.id("x")])
    assert guarded.is_terminated()


def test_rollback_of_the_stop_token_unterminates(
    small: SmallTokenizer, guarded: GuardedGrammar
) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    guarded.rollback(2)
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", [*small.ids("d"), small.eos])
    assert guarded.is_terminated()


def test_reset(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    assert guarded.accept_tokens("req", [*small.ids("abc"), small.eos])
    guarded.reset()
    assert not guarded.is_terminated()
    assert guarded.accept_tokens("req", small.ids("abd"))


def test_fill_bitmask_with_a_real_matcher(small: SmallTokenizer, guarded: GuardedGrammar) -> None:
    assert guarded.accept_tokens("req", small.ids("ab"))
    bitmask = allocate_bitmask(2, small.engine.vocab_size)
    guarded.fill_bitmask(bitmask, 1)
    words = bitmask[1].tolist()
    allowed = {t for t in range(small.engine.vocab_size) if (words[t // 32] >> (t % 32)) & 1}
    assert allowed == {small.id("c"), small.id("d")}
    assert bool((bitmask[0] == -1).all())
    assert guarded.fault is None


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


def test_terminated_grammar_validates_nothing_even_if_the_matcher_would() -> None:
    matcher = StopAtMatcher(stop=9)
    grammar = GuardedGrammar(matcher, "test")
    assert grammar.accept_tokens("req", [1, 9])
    assert grammar.is_terminated()
    matcher.calls.clear()
    assert grammar.validate_tokens([1, 2]) == []
    assert grammar.accept_tokens("req", [3])  # ignored after termination
    assert "accept_token" not in matcher.calls


def assert_faulted(grammar: GuardedGrammar, step: str, method: str) -> None:
    fault = grammar.fault
    assert fault is not None
    assert fault.startswith(step)
    assert "NativeCrash" in fault
    assert f"{method} crashed in native code" in fault
    # From now on the request is ended at its next step, with the fault as its reason.
    FAILURES.take("req")
    assert grammar.accept_tokens("req", [1]) is False
    assert reported("req") == (
        FailureClass.INTERNAL,
        f"grammar test: its grammar failed earlier: {fault}",
    )
    assert grammar.validate_tokens([1, 2]) == []
    mask = torch.zeros((2, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 0)
    assert bool((mask[0] == -1).all())


def test_healthy_fake_matcher_has_no_fault() -> None:
    grammar = GuardedGrammar(RaisingMatcher(), "test")
    assert grammar.accept_tokens("req", [1, 2])
    assert grammar.validate_tokens([3]) == [3]
    assert grammar.fault is None


@pytest.mark.parametrize("method", ["accept_token", "is_terminated"])
def test_accept_tokens_returns_false_instead_of_raising(method: str) -> None:
    grammar = GuardedGrammar(RaisingMatcher(method), "test")
    assert grammar.accept_tokens("req", [1, 2, 3]) is False
    assert_faulted(grammar, "accept_tokens", method)


@pytest.mark.parametrize("method", ["accept_token", "is_terminated", "rollback"])
def test_validate_tokens_returns_empty_instead_of_raising(method: str) -> None:
    grammar = GuardedGrammar(RaisingMatcher(method), "test")
    assert grammar.validate_tokens([1, 2, 3]) == []
    assert_faulted(grammar, "validate_tokens", method)


def test_fill_bitmask_allows_everything_instead_of_raising() -> None:
    grammar = GuardedGrammar(RaisingMatcher("fill_bitmask"), "test")
    mask = torch.zeros((3, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 1)
    assert bool((mask[1] == -1).all())
    assert bool((mask[0] == 0).all()) and bool((mask[2] == 0).all())
    assert_faulted(grammar, "fill_bitmask", "fill_bitmask")


def test_faulted_grammar_stops_calling_the_matcher() -> None:
    matcher = RaisingMatcher("fill_bitmask")
    grammar = GuardedGrammar(matcher, "test")
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    matcher.failing.clear()
    matcher.calls.clear()
    mask = torch.zeros((1, 2), dtype=torch.int32)
    grammar.fill_bitmask(mask, 0)
    grammar.rollback(1)
    assert grammar.accept_tokens("req", [1]) is False
    assert matcher.calls == []
    assert bool((mask[0] == -1).all())


def test_rollback_does_not_raise() -> None:
    grammar = GuardedGrammar(RaisingMatcher("rollback"), "test")
    grammar.rollback(2)
    assert_faulted(grammar, "rollback", "rollback")


def test_reset_does_not_raise() -> None:
    grammar = GuardedGrammar(RaisingMatcher("reset"), "test")
    grammar.reset()
    assert_faulted(grammar, "reset", "reset")


def test_fault_survives_a_successful_reset() -> None:
    grammar = GuardedGrammar(RaisingMatcher("fill_bitmask"), "test")
    grammar.fill_bitmask(torch.zeros((1, 2), dtype=torch.int32), 0)
    grammar.reset()
    assert_faulted(grammar, "fill_bitmask", "fill_bitmask")
