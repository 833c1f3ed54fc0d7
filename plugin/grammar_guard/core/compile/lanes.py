"""The compile threads, in lanes, so that a quick compile never queues behind a slow one.

A task a lane runs may defer follow-up work (storing what it compiled) to
run after it returns, elsewhere: its waiting requests never wait for that.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from grammar_guard.core.compile.priority import lower_current_thread

if TYPE_CHECKING:
    from grammar_guard.core.settings import Settings


# Quick compiles take milliseconds each; two at a time keep a burst of new
# keys moving without taking every core from the decoding loop.
QUICK_LANE_THREADS = 2
# Quick compiles demoted for overrunning their CPU budget that may run on at
# once (each on a spare thread of the lane), see quick_budget.py.
MAX_DEMOTED_QUICK_COMPILES = 2


class Tracked:
    """Futures not done yet, so a caller can wait for the work submitted so far."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[Future[Any]] = set()

    def add(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._discard)

    def wait(self, timeout: float | None) -> bool:
        with self._lock:
            pending = list(self._pending)
        return not wait(pending, timeout=timeout).not_done

    def _discard(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)


class Lane(Executor):
    """One group of compile threads; a task may defer work until after it has returned.

    The cache resolves a compile's waiting requests at the end of its task,
    so work deferred by the compile function (storing the grammar) starts
    only once they all have their grammar.
    """

    def __init__(
        self,
        name: str,
        workers: int,
        follow_ups: Callable[[Callable[[], None]], None],
        tracked: Tracked,
        deferred: threading.local,
        *,
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self._threads = ThreadPoolExecutor(
            max_workers=workers,
            thread_name_prefix=name,
            initializer=initializer,
            initargs=initargs,
        )
        self._follow_ups = follow_ups
        self._tracked = tracked
        self._deferred = deferred

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = self._threads.submit(self._run, functools.partial(fn, *args, **kwargs))
        self._tracked.add(future)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._threads.shutdown(wait=wait, cancel_futures=cancel_futures)

    def _run(self, task: Callable[[], Any]) -> Any:
        self._deferred.tasks = []
        self._deferred.lane = self
        try:
            return task()
        finally:
            for deferred in self._deferred.tasks:
                self._follow_ups(deferred)


class CompilePool:
    """The compile threads, in lanes, so that a quick compile never queues behind a slow one.

    - The quick lane runs compiles that take milliseconds (the engine says
      which, before compiling) at the engine's own priority: a new key's
      first request is served within about its compile time even while
      every core is busy decoding, where a thread at nice +19 would get a
      seventieth of a core. Two compile at a time; the lane's spare
      threads carry compiles demoted for overrunning their CPU budget
      (:mod:`grammar_guard.core.compile.quick_budget`).
    - The isolated lane runs every other compile, in a worker process at
      ``GRAMMAR_GUARD_COMPILE_NICENESS`` by default, so that seconds of
      compiling never slow the engine's decoding loop. With in-thread
      isolation (``lowered``) its threads compile, and run at that niceness.
    - The upgrade lane compiles one background upgrade at a time, at the
      same priority, so upgrades never hold more than one of the isolated
      compiles' workers.

    A quick lane's threads are started by the thread that first submits to
    them (the engine's), and so run at its priority.
    """

    def __init__(
        self,
        settings: Settings,
        follow_ups: Callable[[Callable[[], None]], None],
        *,
        lowered: bool,
    ) -> None:
        self.tracked = Tracked()
        self._deferred = threading.local()
        self.quick = Lane(
            "grammar-guard-quick-compile",
            QUICK_LANE_THREADS + MAX_DEMOTED_QUICK_COMPILES,
            follow_ups,
            self.tracked,
            self._deferred,
        )
        self.isolated = Lane(
            "grammar-guard-compile",
            settings.compile_workers,
            follow_ups,
            self.tracked,
            self._deferred,
            **thread_priority(settings, lowered=lowered),
        )
        # Upgrades (see upgrades.py) one at a time, apart from the requests' compiles.
        self.upgrades_tracked = Tracked()
        self.upgrade = Lane(
            "grammar-guard-upgrade",
            1,
            follow_ups,
            self.upgrades_tracked,
            self._deferred,
            **thread_priority(settings, lowered=lowered),
        )

    def in_quick_lane(self) -> bool:
        """Whether the calling thread runs a task of the quick lane."""
        return getattr(self._deferred, "lane", None) is self.quick

    def defer(self, task: Callable[[], None]) -> None:
        """Run ``task`` (elsewhere) after the current task returns; call from a compile task."""
        self._deferred.tasks.append(task)

    def shutdown(self) -> None:
        for lane in (self.quick, self.isolated, self.upgrade):
            lane.shutdown(wait=False, cancel_futures=True)


def thread_priority(settings: Settings, *, lowered: bool) -> dict[str, Any]:
    """Pool arguments that start each thread at ``GRAMMAR_GUARD_COMPILE_NICENESS`` if ``lowered``.

    Lowered only with in-thread isolation, where the lanes' threads compile
    and the disk writer serialises what they compiled: seconds of CPU the
    engine's own threads must win from them. A lowered thread of the
    engine's process is a hazard wherever it runs Python: holding the GIL
    when the scheduler passes it over, it keeps the engine's loop waiting
    until it runs again (with every core busy, a niced thread running Python
    held the main thread off for hundreds of milliseconds at a time).
    With compiles in worker processes, these threads only hand specs over,
    load what the workers send and write the disk cache, and the costly part
    of that (xgrammar's loading and serialising) releases the GIL: they run
    at the engine's priority.
    """
    if not lowered:
        return {}
    return {"initializer": lower_current_thread, "initargs": (settings.compile_niceness,)}
