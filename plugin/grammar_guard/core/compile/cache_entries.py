"""What the compile cache holds per key: its job, its failure marker, the requests' admissions.

The rules that move these between states are in :mod:`~grammar_guard.core.compile.cache`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Generic, TypeVar

from grammar_guard.core.errors import CompileCrashedError, CompileTimeoutError, InvalidGrammarError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Clock = Callable[[], float]
# What an admission resolves to: a value, or the exception that ends the request.
Outcome = tuple[object, BaseException | None]

# Bytes charged for an entry that holds only an error message.
MARKER_BYTES = 256


class EntryState(enum.Enum):
    IN_FLIGHT = "in flight"
    READY = "ready"
    INVALID = "invalid"  # compile error: permanent
    MARKED = "marked"  # a fresh (or permanent) marker: a timeout, or a worker's death
    EXPIRED = "expired"  # the marker expired: its compile still runs, or died


class Job(Generic[K, V]):
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
class Marker:
    """Refuses a key at once after a transient failure, until it expires."""

    message: str
    expires_at: float | None  # None: permanent
    # Its compile's worker died (CompileCrashedError); else it timed out.
    crashed: bool = False

    def retry_after_s(self, now: float) -> float | None:
        return None if self.expires_at is None else max(0.0, self.expires_at - now)


class Entry(Generic[K, V]):
    __slots__ = ("job", "marker", "size")

    def __init__(self, job: Job[K, V]) -> None:
        self.job = job
        self.marker: Marker | None = None
        self.size = 0


class Admission(Generic[V]):
    """One request's claim on a key; ``future`` resolves exactly once."""

    __slots__ = ("future", "hit", "job", "key", "requested_at", "settled")

    def __init__(self, key: Hashable, requested_at: float) -> None:
        self.key = key
        self.requested_at = requested_at
        self.future: Future[V] = Future()
        # True when the cache answered at once (a finished entry, valid or not).
        self.hit = False
        self.job: Job[Hashable, V] | None = None
        self.settled = False


def marker_error(
    marker: Marker, now: float, *, prefix: str, waited_s: float
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


def resolve(admission: Admission[V], outcome: Outcome) -> None:
    # A host may cancel a request's future (a client abort); the compile
    # behind it carries on for the other waiters and for the cache.
    if not admission.future.set_running_or_notify_cancel():
        return
    value, error = outcome
    if error is not None:
        admission.future.set_exception(error)
    else:
        admission.future.set_result(value)  # type: ignore[arg-type]


def entry_state(entry: Entry[K, V], now: float) -> EntryState:
    """Where ``entry`` stands at ``now``; its marker, if any, decides first."""
    job, marker = entry.job, entry.marker
    if job.finished and isinstance(job.error, InvalidGrammarError):
        return EntryState.INVALID
    if marker is not None and (marker.expires_at is None or now < marker.expires_at):
        return EntryState.MARKED
    if not job.finished:
        return EntryState.EXPIRED if marker is not None else EntryState.IN_FLIGHT
    # A crashed compile always left a marker, now expired: compile again.
    return EntryState.READY if job.error is None else EntryState.EXPIRED


def timeout_error(
    admission: Admission[V], now: float, marker: Marker | None
) -> CompileTimeoutError | CompileCrashedError:
    job = admission.job
    assert job is not None
    waited = now - admission.requested_at
    started = job.started_at
    queued = waited if started is None else max(0.0, started - admission.requested_at)
    detail = (
        f"timed out after {waited:.1f} s ({queued:.1f} s queued, {waited - queued:.1f} s compiling)"
    )
    if marker is None:
        return CompileTimeoutError(
            f"grammar compile {detail}; a retry may succeed",
            waited_s=waited,
            permanent=False,
            retry_after_s=0.0,
        )
    return marker_error(marker, now, prefix=f"{detail}: ", waited_s=waited)
