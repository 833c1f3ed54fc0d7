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

import enum
import heapq
import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from grammar_guard.core.errors import (
    CompileCrashedError,
    CompileTimeoutError,
    InvalidGrammarError,
)
from grammar_guard.core.metrics import CacheMetrics, Counter
from grammar_guard.core.settings import Settings

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Clock = Callable[[], float]
# What an admission resolves to: a value, or the exception that ends the request.
Outcome = tuple[object, BaseException | None]

# Bytes charged for an entry that holds only an error message.
_MARKER_BYTES = 256


class _State(enum.Enum):
    IN_FLIGHT = "in flight"
    READY = "ready"
    INVALID = "invalid"  # compile error: permanent
    MARKED = "marked"  # a fresh (or permanent) marker: a timeout, or a worker's death
    EXPIRED = "expired"  # the marker expired: its compile still runs, or died


class _Job(Generic[K, V]):
    """One run of the compile function for one key."""

    __slots__ = ("error", "finished", "key", "queued_at", "started_at", "value", "waiters")

    def __init__(self, key: K, queued_at: float) -> None:
        self.key = key
        self.queued_at = queued_at
        self.started_at: float | None = None
        self.finished = False
        self.value: V | None = None
        # A CompileCrashedError is transient: the key's entry holds a marker
        # beside it, and the key compiles again once the marker expires.
        self.error: InvalidGrammarError | CompileCrashedError | None = None
        self.waiters: list[Admission[V]] = []


@dataclass
class _Marker:
    """Refuses a key at once after a transient failure, until it expires."""

    message: str
    expires_at: float | None  # None: permanent
    # Its compile's worker died (CompileCrashedError); else it timed out.
    crashed: bool = False

    def retry_after_s(self, now: float) -> float | None:
        return None if self.expires_at is None else max(0.0, self.expires_at - now)


class _Entry(Generic[K, V]):
    __slots__ = ("job", "marker", "size")

    def __init__(self, job: _Job[K, V]) -> None:
        self.job = job
        self.marker: _Marker | None = None
        self.size = 0


class Admission(Generic[V]):
    """One request's claim on a key; ``future`` resolves exactly once."""

    __slots__ = ("_job", "_settled", "future", "hit", "key", "requested_at")

    def __init__(self, key: Hashable, requested_at: float) -> None:
        self.key = key
        self.requested_at = requested_at
        self.future: Future[V] = Future()
        # True when the cache answered at once (a finished entry, valid or not).
        self.hit = False
        self._job: _Job[Hashable, V] | None = None
        self._settled = False


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
        self._entries: OrderedDict[K, _Entry[K, V]] = OrderedDict()
        self._bytes = 0
        # Timeouts and worker deaths per key, each bounded (see _count_failure).
        self._timeouts: OrderedDict[K, int] = OrderedDict()
        self._crashes: OrderedDict[K, int] = OrderedDict()
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
            return self._timeouts.get(key, 0)

    def crashes_of(self, key: K) -> int:
        """How many of the key's compiles have killed their worker since it was last served."""
        with self._lock:
            return self._crashes.get(key, 0)

    def compile_started_at(self, key: K) -> float | None:
        """When a worker picked up the key's current compile; kept after it finishes."""
        with self._lock:
            entry = self._entries.get(key)
            return entry.job.started_at if entry is not None else None

    # -- requests ---------------------------------------------------------

    def admit(self, key: K) -> Admission[V]:
        now = self._clock()
        admission: Admission[V] = Admission(key, now)
        job_to_submit: _Job[K, V] | None = None
        answer: Outcome | None = None  # set when a finished entry answers at once
        with self._lock:
            entry = self._entries.get(key)
            state = self._state(entry, now) if entry is not None else None
            if state is _State.EXPIRED:
                # The marker decayed while its compile still runs: retry with a
                # fresh compile; the old one resolves its own waiters only.
                self._remove(key)
                entry, state = None, None
            if entry is None:
                self.metrics.count(Counter.MISSES)
                job_to_submit = _Job(key, now)
                entry = self._entries[key] = _Entry(job_to_submit)
                self._attach(admission, job_to_submit)
                self._evict_over_budget()
            else:
                self.metrics.count(Counter.HITS)
                self._entries.move_to_end(key)
                if state is _State.IN_FLIGHT:
                    self._attach(admission, entry.job)
                else:
                    admission.hit = True
                    answer = self._answer(entry, now)
                    admission._settled = True
            self._publish_size()
        if job_to_submit is not None:
            self._submit(job_to_submit)
        elif answer is not None:
            _resolve(admission, answer)
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
            if entry is None or self._state(entry, self._clock()) is not _State.READY:
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
                if admission._settled:
                    continue
                deadline = self._deadline(admission)
                if deadline > now:
                    # Its compile started after it was queued: the second phase began.
                    self._push_deadline(admission, deadline)
                    continue
                admission._settled = True
                expired.append((admission, self._time_out(admission, now)))
            next_deadline = self._deadlines[0][0] if self._deadlines else None
        for admission, outcome in expired:
            _resolve(admission, outcome)
        return next_deadline

    def reset(self) -> None:
        """Forget every entry and every per-key count.

        Compiles in flight keep running and still resolve the requests
        waiting on them; their results are not kept.
        """
        with self._lock:
            self._entries.clear()
            self._timeouts.clear()
            self._crashes.clear()
            self._bytes = 0
            self._publish_size()

    def close(self, reason: str) -> None:
        """Fail every request still waiting with ``RuntimeError(reason)``, then reset.

        For a host shutting down: compiles it cancels would otherwise leave
        their waiters unresolved.
        """
        with self._lock:
            waiting = [admission for _, _, admission in self._deadlines if not admission._settled]
            for admission in waiting:
                admission._settled = True
            self._deadlines.clear()
        self.reset()
        for admission in waiting:
            _resolve(admission, (None, RuntimeError(reason)))

    # -- compile jobs -----------------------------------------------------

    def _submit(self, job: _Job[K, V]) -> None:
        executor = self._executor if self._executor_for is None else self._executor_for(job.key)
        try:
            executor.submit(self._run, job)
        except RuntimeError as exc:  # the executor is shut down
            self._abandon(job, exc)

    def _run(self, job: _Job[K, V]) -> None:
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
        job: _Job[K, V],
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
            _resolve(admission, outcome)

    def _settle_entry(self, entry: _Entry[K, V], now: float) -> None:
        job = entry.job
        marker = entry.marker
        if isinstance(job.error, CompileCrashedError):
            if marker is None or marker.expires_at is not None:  # never downgrade a permanent one
                self._record_crash(entry, job.error, now)
        elif job.error is not None:
            # A compile error is permanent and says more than a timeout did.
            entry.marker = None
        elif marker is not None and (marker.expires_at is None or now < marker.expires_at):
            if marker.expires_at is None:
                job.value = None  # never served again: do not hold its memory
        else:
            entry.marker = None
            self._forget_failures(job.key)
        self._resize(entry, self._entry_bytes(entry))
        self._entries.move_to_end(job.key)
        self._evict_over_budget()

    def _abandon(self, job: _Job[K, V], exc: BaseException) -> None:
        """The job could not even be queued: drop it uncached, fail its waiters."""
        with self._lock:
            job.finished = True
            if (entry := self._entries.get(job.key)) is not None and entry.job is job:
                self._remove(job.key)
            waiters = self._claim_waiters(job)
            self._publish_size()
        for admission in waiters:
            _resolve(admission, (None, exc))

    # -- timeouts ---------------------------------------------------------

    def _deadline(self, admission: Admission[V]) -> float:
        job = admission._job
        assert job is not None
        start = job.started_at if job.started_at is not None else admission.requested_at
        return start + self._settings.compile_timeout_s

    def _time_out(self, admission: Admission[V], now: float) -> Outcome:
        job = admission._job
        assert job is not None
        entry = self._entries.get(job.key)
        state = self._state(entry, now) if entry is not None else None
        if entry is not None and state in (_State.READY, _State.INVALID):
            # The key was settled by another compile: nothing timed out for it.
            return self._answer(entry, now)
        if entry is not None and entry.marker is not None and entry.marker.expires_at is None:
            return self._answer(entry, now)  # never downgrade a permanent failure
        if entry is None or entry.job is not job or state is _State.EXPIRED:
            # An orphan's timeout, or a late waiter of a compile whose timeout was
            # already counted: fail this request, record nothing.
            return (None, self._timeout_error(admission, now, marker=None))
        if entry.marker is None:
            entry.marker = self._record_timeout(job.key, now)
            self._resize(entry, self._entry_bytes(entry))
            self._publish_size()
        return (None, self._timeout_error(admission, now, marker=entry.marker))

    def _record_timeout(self, key: K, now: float) -> _Marker:
        self.metrics.count(Counter.COMPILE_TIMEOUTS)
        count = self._count_failure(self._timeouts, key)
        limit = self._settings.compile_timeout_s
        if count > self._settings.max_retries:
            self.metrics.count(Counter.ESCALATIONS)
            retries = f"{count - 1} retr{'y' if count == 2 else 'ies'}"
            message = (
                f"grammar compile timed out ({limit:g} s limit) {count} times; "
                f"gave up after {retries}: retrying will not help, "
                "simplify the grammar (for example smaller maxLength or maxItems)"
            )
            return _Marker(message, expires_at=None)
        ttl = self._settings.ttl_s
        message = (
            f"grammar compile timed out ({limit:g} s limit); it goes on in the background "
            f"and a retry after {ttl:g} s may be served from the cache"
        )
        return _Marker(message, expires_at=now + ttl)

    def _record_crash(self, entry: _Entry[K, V], crash: CompileCrashedError, now: float) -> None:
        """Settle an entry whose compile's worker died: a marker, or the grammar's own error."""
        job = entry.job
        count = self._count_failure(self._crashes, job.key)
        if count > self._settings.max_retries:
            self.metrics.count(Counter.ESCALATIONS)
            entry.marker = None
            job.error = InvalidGrammarError(
                f"the grammar's compile killed its worker {count} times (last: {crash}): "
                "the grammar is the likely cause; simplify it"
            )
            return
        ttl = self._settings.ttl_s
        entry.marker = _Marker(
            f"{crash}; a retry after {ttl:g} s compiles the grammar again",
            expires_at=now + ttl,
            crashed=True,
        )
        job.error = _marker_error(entry.marker, now, prefix="", waited_s=0.0)

    def _count_failure(self, counts: OrderedDict[K, int], key: K) -> int:
        """Count one more failure of ``key``; only the most recently failed keys are kept."""
        count = counts.pop(key, 0) + 1
        counts[key] = count
        while len(counts) > self._settings.max_tracked_keys:
            counts.popitem(last=False)
        return count

    def _forget_failures(self, key: K) -> None:
        """The key was served: its transient failures start again from nothing."""
        self._timeouts.pop(key, None)
        self._crashes.pop(key, None)

    def _timeout_error(
        self, admission: Admission[V], now: float, marker: _Marker | None
    ) -> CompileTimeoutError | CompileCrashedError:
        job = admission._job
        assert job is not None
        waited = now - admission.requested_at
        started = job.started_at
        queued = waited if started is None else max(0.0, started - admission.requested_at)
        detail = (
            f"timed out after {waited:.1f} s "
            f"({queued:.1f} s queued, {waited - queued:.1f} s compiling)"
        )
        if marker is None:
            return CompileTimeoutError(
                f"grammar compile {detail}; a retry may succeed",
                waited_s=waited,
                permanent=False,
                retry_after_s=0.0,
            )
        return _marker_error(marker, now, prefix=f"{detail}: ", waited_s=waited)

    # -- entries ----------------------------------------------------------

    def _state(self, entry: _Entry[K, V], now: float) -> _State:
        job, marker = entry.job, entry.marker
        if job.finished and isinstance(job.error, InvalidGrammarError):
            return _State.INVALID
        if marker is not None and (marker.expires_at is None or now < marker.expires_at):
            return _State.MARKED
        if not job.finished:
            return _State.EXPIRED if marker is not None else _State.IN_FLIGHT
        # A crashed compile always left a marker, now expired: compile again.
        return _State.READY if job.error is None else _State.EXPIRED

    def _answer(self, entry: _Entry[K, V], now: float) -> Outcome:
        """What a finished entry says to a request (lock held)."""
        state = self._state(entry, now)
        if state is _State.MARKED:
            assert entry.marker is not None
            return (None, _marker_error(entry.marker, now, prefix="", waited_s=0.0))
        if state is _State.INVALID:
            return (None, entry.job.error)
        if entry.marker is not None:
            # The marker expired and the compile had landed: success is active now.
            entry.marker = None
            self._forget_failures(entry.job.key)
            self._resize(entry, self._entry_bytes(entry))
        return (entry.job.value, None)

    def _attach(self, admission: Admission[V], job: _Job[K, V]) -> None:
        admission._job = job  # type: ignore[assignment]
        job.waiters.append(admission)
        self._push_deadline(admission, self._deadline(admission))
        if self._on_new_deadline is not None:
            self._on_new_deadline()

    def _push_deadline(self, admission: Admission[V], deadline: float) -> None:
        heapq.heappush(self._deadlines, (deadline, next(self._sequence), admission))

    def _claim_waiters(self, job: _Job[K, V]) -> list[Admission[V]]:
        waiters = [admission for admission in job.waiters if not admission._settled]
        for admission in waiters:
            admission._settled = True
        job.waiters.clear()
        return waiters

    def _entry_bytes(self, entry: _Entry[K, V]) -> int:
        job = entry.job
        size = _MARKER_BYTES if (job.error is not None or entry.marker is not None) else 0
        if job.value is not None:
            size += self._size_of(job.value)
        return size

    def _resize(self, entry: _Entry[K, V], size: int) -> None:
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


def _marker_error(
    marker: _Marker, now: float, *, prefix: str, waited_s: float
) -> CompileTimeoutError | CompileCrashedError:
    retry_after = marker.retry_after_s(now)
    if marker.crashed:
        return CompileCrashedError(prefix + marker.message, retry_after_s=retry_after)
    return CompileTimeoutError(
        prefix + marker.message,
        waited_s=waited_s,
        permanent=marker.expires_at is None,
        retry_after_s=retry_after,
    )


def _resolve(admission: Admission[V], outcome: Outcome) -> None:
    # A host may cancel a request's future (a client abort); the compile
    # behind it carries on for the other waiters and for the cache.
    if not admission.future.set_running_or_notify_cancel():
        return
    value, error = outcome
    if error is not None:
        admission.future.set_exception(error)
    else:
        admission.future.set_result(value)  # type: ignore[arg-type]


class DeadlineWatcher:
    """A daemon thread that calls :meth:`GrammarCache.expire_due` when a deadline is due."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._wake = threading.Event()
        self._stopped = False
        self._cache: GrammarCache[object, object] | None = None
        self._thread = threading.Thread(
            target=self._loop, name="grammar-guard-deadlines", daemon=True
        )

    def notify(self) -> None:
        """A new deadline exists: recompute how long to sleep."""
        self._wake.set()

    def start(self, cache: GrammarCache[K, V]) -> None:
        self._cache = cache  # type: ignore[assignment]
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _loop(self) -> None:
        assert self._cache is not None
        while not self._stopped:
            next_deadline = self._cache.expire_due(self._clock())
            timeout = None if next_deadline is None else max(0.0, next_deadline - self._clock())
            self._wake.wait(timeout)
            self._wake.clear()
