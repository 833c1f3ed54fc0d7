"""Work taken off the caller's thread, in two lanes by input size, with a cap on what may wait.

The API server validates request text here instead of on its event loop. A
large input (a 1 MiB grammar, a choice of 100,000 strings) takes seconds to
judge even with every check linear; in its own lane it cannot hold up the
small ones every ordinary client sends. Each lane lets a fixed number of
tasks wait: past that a submission is refused at once, so a flood of hostile
input is answered instead of queueing without bound. A caller waits only
for its budget and then gives up: a task that has not started is cancelled,
one that has runs to its end (every check is bounded by the input limit).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.gil_handoff import SwitchIntervalWhileRunning
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS

T = TypeVar("T")


class LaneFullError(InvalidGrammarError):
    """Too many inputs of this size are being judged already; the client should retry."""


@dataclass(frozen=True)
class LaneSizes:
    """Threads and waiting places of each lane."""

    small_threads: int = 2
    small_waiting: int = 64
    large_threads: int = 1
    large_waiting: int = 16


class _Lane:
    def __init__(
        self,
        name: str,
        threads: int,
        waiting: int,
        handoff: SwitchIntervalWhileRunning | None = None,
    ) -> None:
        self.name = name
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix=name)
        # Running and waiting tasks together.
        self._places = threading.BoundedSemaphore(threads + waiting)
        self._handoff = handoff

    def submit(self, task: Callable[[], T]) -> Future[T]:
        if not self._places.acquire(blocking=False):
            raise LaneFullError(
                "too many grammars of this size are being checked right now; retry shortly"
            )
        handoff = self._handoff
        if handoff is not None:
            task = functools.partial(_run_handing_off, handoff, task)
        future = self._threads.submit(task)
        # Also runs when the future is cancelled before it started.
        future.add_done_callback(lambda _done: self._places.release())
        return future


def _run_handing_off(handoff: SwitchIntervalWhileRunning, task: Callable[[], T]) -> T:
    with handoff.running():
        return task()


class BoundedLanes:
    """A small-input lane and a large-input lane, each with bounded waiting.

    While the large lane works (seconds of Python code), the GIL changes
    hands more often (:mod:`grammar_guard.core.request.gil_handoff`), so the caller's
    event loop and the threads of every other request are not kept waiting
    for it.
    """

    def __init__(self, name: str, sizes: LaneSizes | None = None) -> None:
        sizes = sizes or LaneSizes()
        self._small = _Lane(f"{name}-small", sizes.small_threads, sizes.small_waiting)
        self._large = _Lane(
            f"{name}-large",
            sizes.large_threads,
            sizes.large_waiting,
            SwitchIntervalWhileRunning(),
        )

    def submit(self, size: int, task: Callable[[], T]) -> Future[T]:
        """Run ``task`` in the lane for an input of ``size`` characters.

        Raises :class:`LaneFullError` if that lane has no place left.
        """
        lane = self._small if size < SMALL_SPEC_CHARS else self._large
        return lane.submit(task)


def bounded_size(value: object, limit: int) -> int:
    """The characters of a JSON-like ``value`` (strings, keys, containers), counted up to ``limit``.

    Stops as soon as the count reaches ``limit``: its loop runs at most about
    ``limit`` times however large the value, enough to pick a lane on the
    caller's thread without reading a hostile value through.
    """
    total = 0
    pending = [value]
    while pending and total < limit:
        node = pending.pop()
        total += 2  # a bracket pair, quotes or a separator: at least some text per node
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, dict):
            pending.extend(node.keys())
            pending.extend(node.values())
        elif isinstance(node, list | tuple):
            pending.extend(node)
    return total
