"""A short, budgeted wait for a quick compile, taken where the host schedules requests.

A host schedules a request only once its grammar is ready, and looks again
at the next step. A grammar that compiles in milliseconds but lands just
after the host looked waits a whole step: a second on a CPU batch prefill.
:class:`WaitedForWhenPolled` waits those milliseconds at the moment the host
first asks whether the grammar is ready, so the request joins the step being
scheduled. Waiting when the request is admitted instead held the admitting
thread while an unconstrained request sent with it went ahead, and the
grammar, ready milliseconds later, missed the step that request joined.

The thread that asks is the engine's loop, so the wait is bounded twice:
each wait by ``max_wait_s``, and all waits together by a token bucket that
holds at most ``burst_s`` and refills at ``share`` of the loop's time, so a
burst of new keys holds the loop for ``burst_s`` at most, and steady traffic
for ``share`` of its time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any, TypeVar

Clock = Callable[[], float]
Waiter = Callable[[Future[Any], float], None]
T = TypeVar("T")

# A quick compile takes a few milliseconds, tens on a machine whose cores
# are all busy; one not done by then is not worth holding every running
# request for.
DEFAULT_MAX_WAIT_S = 0.1
# The first requests of a fresh engine (a new key each) arrive together: one
# of each of the eight request kinds may each need the longest wait, and a
# budget spent before the last of them costs it a whole step (a fifth of a
# second on a busy CPU), beyond its compile.
DEFAULT_BURST_S = 1.0
# At most this fraction of the loop's time goes to waiting.
DEFAULT_SHARE = 0.1


def _wait_for(future: Future[Any], timeout: float) -> None:
    wait([future], timeout=timeout)


class InlineWaitBudget:
    def __init__(
        self,
        *,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        burst_s: float = DEFAULT_BURST_S,
        share: float = DEFAULT_SHARE,
        clock: Clock = time.monotonic,
        waiter: Waiter = _wait_for,
    ) -> None:
        self._max_wait_s = max_wait_s
        self._burst_s = burst_s
        self._share = share
        self._clock = clock
        self._waiter = waiter
        self._lock = threading.Lock()
        self._available_s = burst_s
        self._refilled_at = clock()

    def wait(self, future: Future[Any]) -> None:
        """Wait for ``future`` as long as the budget allows; return early when it is done."""
        if future.done():
            return
        allowed = self._reserve()
        if allowed <= 0:
            return
        started = self._clock()
        try:
            self._waiter(future, allowed)
        finally:
            spent = min(allowed, self._clock() - started)
            with self._lock:
                self._available_s += allowed - spent  # what was reserved but not waited

    def _reserve(self) -> float:
        """One wait's budget, taken so that a concurrent wait cannot spend it too."""
        with self._lock:
            now = self._clock()
            earned = (now - self._refilled_at) * self._share
            self._available_s = min(self._burst_s, self._available_s + earned)
            self._refilled_at = now
            allowed = min(self._max_wait_s, self._available_s)
            self._available_s -= allowed
            return allowed


class WaitedForWhenPolled(Future[T]):
    """A future whose first ``done()`` while pending waits for it, within ``budget``.

    vLLM's scheduler asks ``done()`` of a waiting request's grammar when it
    could schedule the request this step, on the loop's thread: that is when
    a wait pays. Later calls do not wait; a grammar the first wait did not see
    finish joins a later step.
    """

    def __init__(self, budget: InlineWaitBudget) -> None:
        super().__init__()
        self._budget: InlineWaitBudget | None = budget

    def done(self) -> bool:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget.wait(self)  # its own done() call finds no budget left here
        return super().done()
