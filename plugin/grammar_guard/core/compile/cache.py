"""The compile cache: one compile per key, bounded waits, timeout markers, a memory bound.

Every rule of the compile cache (docs/compile-cache.md) lives here, host-agnostic:

- A request for a key gets an :class:`Admission` whose ``future`` resolves
  exactly once: to the compiled value, or to the error that ends the request
  (:class:`InvalidGrammarError`, :class:`CompileTimeoutError` or
  :class:`CompileCrashedError`).
- One compile per key: the first miss starts a compile job on the given
  executor; every other request for the key joins that job.
- Two-phase timeout: a request waits at most ``T`` while its job is queued and
  at most ``T`` from the moment the job starts. Deadlines are enforced by
  :meth:`GrammarCache.expire_due`, which a :class:`DeadlineWatcher` calls on a
  thread of its own (tests call it with their own clock).
- A timed-out job keeps compiling; its result lands in the cache. While the
  timeout marker is fresh it wins over that result; once it has expired the
  result is served.
- A compile error is permanent; a timeout marker expires after a TTL until the
  key has timed out more than ``max_retries`` times, then it is permanent too.
- A compile whose worker process died (:class:`CompileCrashedError`) is not
  the grammar's fault as far as anyone knows: it leaves a marker that expires
  after the same TTL, and the key is compiled again. Only once the key's
  compiles have killed their worker more than ``max_retries`` times is the
  grammar taken for the cause and refused for good.
- Finished entries are evicted least recently used to stay under a byte and an
  entry budget; in-flight ones never are (their waiters depend on them).

Waiters are always resolved outside the lock, so host callbacks attached to an
admission's future never run while the cache is locked.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from typing import Generic, TypeVar

from grammar_guard.core.compile.cache_entries import (
    MARKER_BYTES,
    Admission,
    Clock,
    Entry,
    EntryState,
    Job,
    Outcome,
    entry_state,
    marker_error,
    resolve,
    timeout_error,
)
from grammar_guard.core.compile.failure_markers import FailureMarkers
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.metrics import CacheMetrics, Counter
from grammar_guard.core.settings import Settings

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class GrammarCache(Generic[K, V]):
    def __init__(
        self,
        compile_fn: Callable[[K], V],
        executor: Executor,
        settings: Settings,
        *,
        size_of: Callable[[V], int] = lambda _value: 0,
        clock: Clock = time.monotonic,
        metrics: CacheMetrics | None = None,
        on_new_deadline: Callable[[], None] | None = None,
        executor_for: Callable[[K], Executor] | None = None,
    ) -> None:
        self._compile_fn = compile_fn
        self._executor = executor
        # Which executor a key's compile is queued on, where keys differ in
        # how long they compile; ``executor`` for every key by default.
        self._executor_for = executor_for
        self._settings = settings
        self._size_of = size_of
        self._clock = clock
        self.metrics = metrics or CacheMetrics()
        self._on_new_deadline = on_new_deadline
        self._lock = threading.Lock()
        # Least recently used first.
        self._entries: OrderedDict[K, Entry[K, V]] = OrderedDict()
        self._bytes = 0
        # Timeouts and worker deaths per key, each bounded.
        self._failures: FailureMarkers[K] = FailureMarkers(settings, self.metrics)
        self._deadlines: list[tuple[float, int, Admission[V]]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def timeouts_of(self, key: K) -> int:
        with self._lock:
            return self._failures.timeouts_of(key)

    def crashes_of(self, key: K) -> int:
        """How many of the key's compiles have killed their worker since it was last served."""
        with self._lock:
            return self._failures.crashes_of(key)

    def compile_started_at(self, key: K) -> float | None:
        """When a worker picked up the key's current compile; kept after it finishes."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.job.started_at if entry is not None else None

    # -- requests ---------------------------------------------------------

    def admit(self, key: K) -> Admission[V]:
        now = self._clock()
        admission: Admission[V] = Admission(key, now)
        job_to_submit: Job[K, V] | None = None
        answer: Outcome | None = None  # set when a finished entry answers at once
        with self._lock:
            entry = self._entries.get(key)
            state = entry_state(entry, now) if entry is not None else None
            if state is EntryState.EXPIRED:
                # The marker decayed while its compile still runs: retry with a
                # fresh compile; the old one resolves its own waiters only.
                self._remove(key)
                entry, state = None, None
            if entry is None:
                self.metrics.count(Counter.MISSES)
                job_to_submit = Job(key, now)
                entry = self._entries[key] = Entry(job_to_submit)
                self._attach(admission, job_to_submit)
                self._evict_over_budget()
            else:
                self.metrics.count(Counter.HITS)
                self._entries.move_to_end(key)
                if state is EntryState.IN_FLIGHT:
                    self._attach(admission, entry.job)
                else:
                    admission.hit = True
                    answer = self._answer(entry, now)
                    admission.settled = True
            self._publish_size()
        if job_to_submit is not None:
            self._submit(job_to_submit)
        elif answer is not None:
            resolve(admission, answer)
        return admission

    def upgrade(self, key: K, value: V) -> bool:
        """Serve ``value`` to ``key``'s later requests in place of the one it compiled to.

        For a second compile of the same grammar, one that is cheaper to use.
        Only a key whose compile succeeded and is served now is upgraded;
        requests already holding the old value keep it. Returns whether the
        value took its place (not for a key evicted, failed or timed out
        since); the memory bound applies to the new size at once, and the
        key counts as just used.
        """
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry_state(entry, self._clock()) is not EntryState.READY:
                return False
            entry.job.value = value
            self._resize(entry, self._entry_bytes(entry))
            # Upgrades follow requests, and a new value is the last to evict.
            self._entries.move_to_end(key)
            self._evict_over_budget()
            self._publish_size()
            return True

    def expire_due(self, now: float | None = None) -> float | None:
        """Fail every waiting request whose deadline has passed; return the next deadline."""
        now = self._clock() if now is None else now
        expired: list[tuple[Admission[V], Outcome]] = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, admission = heapq.heappop(self._deadlines)
                if admission.settled:
                    continue
                deadline = self._deadline(admission)
                if deadline > now:
                    # Its compile started after it was queued: the second phase began.
                    self._push_deadline(admission, deadline)
                    continue
                admission.settled = True
                expired.append((admission, self._time_out(admission, now)))
            next_deadline = self._deadlines[0][0] if self._deadlines else None
        for admission, outcome in expired:
            resolve(admission, outcome)
        return next_deadline

    def reset(self) -> None:
        """Forget every entry and every per-key count.

        Compiles in flight keep running and still resolve the requests
        waiting on them; their results are not kept.
        """
        with self._lock:
            self._entries.clear()
            self._failures.clear()
            self._bytes = 0
            self._publish_size()

    def close(self, reason: str) -> None:
        """Fail every request still waiting with ``RuntimeError(reason)``, then reset.

        For a host shutting down: compiles it cancels would otherwise leave
        their waiters unresolved.
        """
        with self._lock:
            waiting = [admission for _, _, admission in self._deadlines if not admission.settled]
            for admission in waiting:
                admission.settled = True
            self._deadlines.clear()
        self.reset()
        for admission in waiting:
            resolve(admission, (None, RuntimeError(reason)))

    # -- compile jobs -----------------------------------------------------

    def _submit(self, job: Job[K, V]) -> None:
        executor = self._executor if self._executor_for is None else self._executor_for(job.key)
        try:
            executor.submit(self._run, job)
        except RuntimeError as exc:  # the executor is shut down
            self._abandon(job, exc)

    def _run(self, job: Job[K, V]) -> None:
        with self._lock:
            job.started_at = self._clock()
        value: V | None = None
        error: InvalidGrammarError | CompileCrashedError | None = None
        try:
            value = self._compile_fn(job.key)
        except (InvalidGrammarError, CompileCrashedError) as exc:
            error = exc
        except Exception as exc:
            error = InvalidGrammarError(f"grammar compile failed: {type(exc).__name__}: {exc}")
        finally:
            if value is None and error is None:
                error = InvalidGrammarError("grammar compile was interrupted")
            self._finish(job, value, error)

    def _finish(
        self,
        job: Job[K, V],
        value: V | None,
        error: InvalidGrammarError | CompileCrashedError | None,
    ) -> None:
        now = self._clock()
        with self._lock:
            job.finished, job.value, job.error = True, value, error
            self.metrics.count(Counter.COMPILES)
            if isinstance(error, CompileCrashedError):
                self.metrics.count(Counter.COMPILE_CRASHES)
            elif error is not None:
                self.metrics.count(Counter.COMPILE_ERRORS)
            self.metrics.observe_compile(now - (job.started_at or now))
            entry = self._entries.get(job.key)
            if entry is not None and entry.job is job:
                self._settle_entry(entry, now)
            # Otherwise the job is an orphan (reset, or replaced after its marker
            # expired): it answers its own waiters and touches nothing else.
            waiters = self._claim_waiters(job)
            self._publish_size()
        # The error as settled: a crash says when the key compiles again, or
        # has become the grammar's own error.
        outcome: Outcome = (value, job.error)
        for admission in waiters:
            resolve(admission, outcome)

    def _settle_entry(self, entry: Entry[K, V], now: float) -> None:
        job = entry.job
        marker = entry.marker
        if isinstance(job.error, CompileCrashedError):
            if marker is None or marker.expires_at is not None:  # never downgrade a permanent one
                self._failures.record_crash(entry, job.error, now)
        elif job.error is not None:
            # A compile error is permanent and says more than a timeout did.
            entry.marker = None
        elif marker is not None and (marker.expires_at is None or now < marker.expires_at):
            if marker.expires_at is None:
                job.value = None  # never served again: do not hold its memory
        else:
            entry.marker = None
            self._failures.forget(job.key)
        self._resize(entry, self._entry_bytes(entry))
        self._entries.move_to_end(job.key)
        self._evict_over_budget()

    def _abandon(self, job: Job[K, V], exc: BaseException) -> None:
        """The job could not even be queued: drop it uncached, fail its waiters."""
        with self._lock:
            job.finished = True
            if (entry := self._entries.get(job.key)) is not None and entry.job is job:
                self._remove(job.key)
            waiters = self._claim_waiters(job)
            self._publish_size()
        for admission in waiters:
            resolve(admission, (None, exc))

    # -- timeouts ---------------------------------------------------------

    def _deadline(self, admission: Admission[V]) -> float:
        job = admission.job
        assert job is not None
        start = job.started_at if job.started_at is not None else admission.requested_at
        return start + self._settings.compile_timeout_s

    def _time_out(self, admission: Admission[V], now: float) -> Outcome:
        job = admission.job
        assert job is not None
        entry = self._entries.get(job.key)
        state = entry_state(entry, now) if entry is not None else None
        if entry is not None and state in (EntryState.READY, EntryState.INVALID):
            # The key was settled by another compile: nothing timed out for it.
            return self._answer(entry, now)
        if entry is not None and entry.marker is not None and entry.marker.expires_at is None:
            return self._answer(entry, now)  # never downgrade a permanent failure
        if entry is None or entry.job is not job or state is EntryState.EXPIRED:
            # An orphan's timeout, or a late waiter of a compile whose timeout was
            # already counted: fail this request, record nothing.
            return (None, timeout_error(admission, now, marker=None))
        if entry.marker is None:
            entry.marker = self._failures.record_timeout(job.key, now)
            self._resize(entry, self._entry_bytes(entry))
            self._publish_size()
        return (None, timeout_error(admission, now, marker=entry.marker))

    # -- entries ----------------------------------------------------------

    def _answer(self, entry: Entry[K, V], now: float) -> Outcome:
        """What a finished entry says to a request (lock held)."""
        state = entry_state(entry, now)
        if state is EntryState.MARKED:
            assert entry.marker is not None
            return (None, marker_error(entry.marker, now, prefix="", waited_s=0.0))
        if state is EntryState.INVALID:
            return (None, entry.job.error)
        if entry.marker is not None:
            # The marker expired and the compile had landed: success is active now.
            entry.marker = None
            self._failures.forget(entry.job.key)
            self._resize(entry, self._entry_bytes(entry))
        return (entry.job.value, None)

    def _attach(self, admission: Admission[V], job: Job[K, V]) -> None:
        admission.job = job  # type: ignore[assignment]
        job.waiters.append(admission)
        self._push_deadline(admission, self._deadline(admission))
        if self._on_new_deadline is not None:
            self._on_new_deadline()

    def _push_deadline(self, admission: Admission[V], deadline: float) -> None:
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), admission))

    def _claim_waiters(self, job: Job[K, V]) -> list[Admission[V]]:
        waiters = [admission for admission in job.waiters if not admission.settled]
        for admission in waiters:
            admission.settled = True
        job.waiters.clear()
        return waiters

    def _entry_bytes(self, entry: Entry[K, V]) -> int:
        job = entry.job
        size = MARKER_BYTES if (job.error is not None or entry.marker is not None) else 0
        if job.value is not None:
            size += self._size_of(job.value)
        return size

    def _resize(self, entry: Entry[K, V], size: int) -> None:
        self._bytes += size - entry.size
        entry.size = size

    def _remove(self, key: K) -> None:
        entry = self._entries.pop(key)
        self._bytes -= entry.size

    def _evict_over_budget(self) -> None:
        settings = self._settings
        if self._bytes <= settings.max_bytes and len(self._entries) <= settings.max_entries:
            return
        for key in [key for key, entry in self._entries.items() if entry.job.finished]:
            if self._bytes <= settings.max_bytes and len(self._entries) <= settings.max_entries:
                return
            self._remove(key)
            self.metrics.count(Counter.EVICTIONS)

    def _publish_size(self) -> None:
        self.metrics.set_size(self._bytes, len(self._entries))
