"""A CPU-time budget for the compiles that run in the engine's own process.

The quick lane compiles in threads of the engine's process, because a key
predicted to compile in milliseconds is served fastest there. A prediction
can be wrong (a hostile regex is built to make it wrong), and a thread
cannot be killed. So the prediction is checked by measurement: a watcher
reads the CPU time of each quick compile's thread (which does all of that
compile's work, see :mod:`grammar_guard.core.engines.threads`), and a
compile past its budget is *demoted*:

- its thread's nice value is raised, so it takes only the CPU the engine
  and the other compiles leave;
- it gives its place in the quick lane back, and the next queued quick
  compile starts on a spare thread, so cheap first requests keep their lane;
- its key is remembered, and any later compile of it (a retry after a
  timeout) goes to a worker process, where it can be killed.

Demoted compiles are bounded in number: while ``max_demoted`` of them run,
no compile is taken into the quick lane at all (every key goes to the
workers), so hostile requests cannot fill the engine's process with
unkillable compiles. The demoted compile's request keeps its deadlines as
usual: it times out like any slow compile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from grammar_guard.core.compile.priority import lower_thread

# Quick compiles take milliseconds of CPU; one that has taken this much was
# mispredicted by orders of magnitude.
QUICK_CPU_BUDGET_S = 0.5
# How often the watcher reads the running compiles' clocks.
WATCH_INTERVAL_S = 0.05
# Keys whose compile overran, remembered so their retries go to a worker.
MAX_REMEMBERED_OVERRUNS = 1024


def thread_cpu_time(thread_ident: int) -> float:
    """CPU seconds the live thread ``thread_ident`` (a ``threading.get_ident()``) has used."""
    return time.clock_gettime(time.pthread_getcpuclockid(thread_ident))


@dataclass
class _Running:
    key: Hashable
    ident: int
    native_id: int
    started_cpu_s: float
    demoted: bool = False


class QuickCompileBudget:
    """Places in the quick lane, and the CPU-time watch that demotes a compile past its budget.

    ``cpu_time`` reads a thread's CPU clock and ``demote_thread`` lowers a
    thread's priority (tests pass their own); ``on_demote`` is told each
    demotion (the metrics count it).
    """

    def __init__(
        self,
        *,
        places: int,
        max_demoted: int,
        niceness: int,
        budget_s: float = QUICK_CPU_BUDGET_S,
        cpu_time: Callable[[int], float] = thread_cpu_time,
        demote_thread: Callable[[int, int], None] = lower_thread,
        on_demote: Callable[[], None] = lambda: None,
    ) -> None:
        self._budget_s = budget_s
        self._max_demoted = max_demoted
        self._niceness = niceness
        self._cpu_time = cpu_time
        self._demote_thread = demote_thread
        self._on_demote = on_demote
        self._places = threading.Semaphore(places)
        self._lock = threading.Lock()
        # Wakes the watcher when a compile starts: it sleeps while none runs.
        self._work = threading.Condition(self._lock)
        self._running: dict[int, _Running] = {}
        self._demoted = 0
        self._overran: OrderedDict[Hashable, None] = OrderedDict()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def admits(self, key: Hashable) -> bool:
        """Whether ``key`` may compile in the quick lane: it never overran, and there is room."""
        with self._lock:
            return key not in self._overran and self._demoted < self._max_demoted

    @contextlib.contextmanager
    def compiling(self, key: Hashable) -> Iterator[None]:
        """Hold a quick-lane place while the calling thread compiles ``key``, under the watch."""
        self._places.acquire()
        running = _Running(
            key,
            threading.get_ident(),
            threading.get_native_id(),
            self._cpu_time(threading.get_ident()),
        )
        with self._lock:
            self._running[running.ident] = running
            self._work.notify()
        try:
            yield
        finally:
            with self._lock:
                del self._running[running.ident]
                if running.demoted:
                    self._demoted -= 1
            if not running.demoted:
                self._places.release()

    def check(self) -> None:
        """Demote every compile past its budget (the watcher calls this; tests call it directly)."""
        with self._lock:
            running = [entry for entry in self._running.values() if not entry.demoted]
        for entry in running:
            with contextlib.suppress(OSError):  # the thread ended meanwhile
                if self._cpu_time(entry.ident) - entry.started_cpu_s > self._budget_s:
                    self._demote(entry)

    def start_watching(self) -> None:
        self._watcher = threading.Thread(
            target=self._watch, name="grammar-guard-quick-budget", daemon=True
        )
        self._watcher.start()

    def stop_watching(self) -> None:
        with self._lock:
            self._stop.set()
            self._work.notify()

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            with self._lock:
                while not self._running and not self._stop.is_set():
                    self._work.wait()
            self.check()

    def _demote(self, entry: _Running) -> None:
        with self._lock:
            if entry.demoted or entry.ident not in self._running:
                return
            entry.demoted = True
            self._demoted += 1
            self._overran[entry.key] = None
            if len(self._overran) > MAX_REMEMBERED_OVERRUNS:
                self._overran.popitem(last=False)
        self._demote_thread(entry.native_id, self._niceness)
        self._places.release()
        self._on_demote()
