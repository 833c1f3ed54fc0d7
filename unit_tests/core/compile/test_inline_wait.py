"""InlineWaitBudget: the engine's loop waits for quick compiles, within a bounded share of its time;
WaitedForWhenPolled: the wait is taken when the scheduler first asks.

A fake clock and a fake waiter that "waits" by moving that clock; nothing sleeps.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from grammar_guard.core.compile.inline_wait import InlineWaitBudget, WaitedForWhenPolled

MAX_WAIT_S = 0.05
BURST_S = 0.15
SHARE = 0.1


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.waits: list[float] = []
        self.lands_at_once = False  # True: the compile ends the moment it is waited for

    def clock(self) -> float:
        return self.now

    def waiter(self, future: Future[Any], timeout: float) -> None:
        if self.lands_at_once:
            return
        self.waits.append(timeout)  # never done in time: the whole timeout passes
        self.now += timeout


def _budget(fake: FakeTime) -> InlineWaitBudget:
    return InlineWaitBudget(
        max_wait_s=MAX_WAIT_S, burst_s=BURST_S, share=SHARE, clock=fake.clock, waiter=fake.waiter
    )


def test_a_wait_lasts_at_most_the_longest_wait() -> None:
    fake = FakeTime()
    _budget(fake).wait(Future())
    assert fake.waits == [MAX_WAIT_S]


def test_a_done_future_costs_nothing() -> None:
    fake = FakeTime()
    budget = _budget(fake)
    done: Future[int] = Future()
    done.set_result(1)
    budget.wait(done)
    budget.wait(Future())
    assert fake.waits == [MAX_WAIT_S]


def test_waits_take_at_most_their_share_of_the_thread_s_time() -> None:
    fake = FakeTime()
    budget = _budget(fake)
    started = fake.now
    for _ in range(1000):  # a burst of new keys, none compiling in time
        budget.wait(Future())
        fake.now += 0.001  # the loop's own work between two admissions
    elapsed = fake.now - started
    assert max(fake.waits) <= MAX_WAIT_S
    assert sum(fake.waits) <= BURST_S + SHARE * elapsed
    assert sum(fake.waits) >= SHARE * elapsed * 0.9  # and the share is used, not lost


def test_a_burst_gets_its_waits_at_once_and_a_quiet_spell_earns_no_more() -> None:
    fake = FakeTime()
    budget = _budget(fake)
    for _ in range(3):
        budget.wait(Future())
    assert fake.waits == [MAX_WAIT_S] * 3  # the burst: back to back, none cut short
    fake.now += 3600
    for _ in range(4):
        budget.wait(Future())
    assert sum(fake.waits[3:]) < BURST_S + 4 * MAX_WAIT_S * SHARE


def test_time_not_waited_stays_in_the_budget() -> None:
    fake = FakeTime()
    budget = _budget(fake)
    fake.lands_at_once = True
    for _ in range(100):
        budget.wait(Future())
    fake.lands_at_once = False
    budget.wait(Future())
    assert fake.waits == [MAX_WAIT_S]


def test_a_polled_future_waits_on_its_first_poll_only() -> None:
    fake = FakeTime()
    pending = WaitedForWhenPolled[int](_budget(fake))
    assert not pending.done()
    assert not pending.done()  # the next step's look: the request waits for a later step
    assert fake.waits == [MAX_WAIT_S]


def test_a_compile_that_lands_during_the_first_poll_is_done() -> None:
    def lands(future: Future[Any], timeout: float) -> None:
        future.set_result(1)

    pending = WaitedForWhenPolled[int](InlineWaitBudget(waiter=lands))
    assert pending.done() and pending.result() == 1


def test_a_future_done_before_it_is_polled_spends_no_budget() -> None:
    fake = FakeTime()
    budget = _budget(fake)
    for _ in range(10):
        landed = WaitedForWhenPolled[int](budget)
        landed.set_result(1)
        assert landed.done()
    budget.wait(Future())
    assert fake.waits == [MAX_WAIT_S]
