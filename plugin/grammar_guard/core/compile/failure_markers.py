"""How often each key's compile timed out or killed its worker, and the markers that follow.

A transient failure leaves a marker that refuses the key until it expires;
more than ``max_retries`` failures of one key make the refusal permanent.
Only the most recently failed keys are counted, so a flood of failing keys
cannot grow the counts without bound. The cache calls these with its lock held.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from grammar_guard.core.compile.cache_entries import Entry, Marker, marker_error
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.metrics import CacheMetrics, Counter
from grammar_guard.core.settings import Settings

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class FailureMarkers(Generic[K]):
    """The cache's failure counts per key and the markers they call for."""

    def __init__(self, settings: Settings, metrics: CacheMetrics) -> None:
        self._settings = settings
        self.metrics = metrics
        self._timeouts: OrderedDict[K, int] = OrderedDict()
        self._crashes: OrderedDict[K, int] = OrderedDict()

    def timeouts_of(self, key: K) -> int:
        return self._timeouts.get(key, 0)

    def crashes_of(self, key: K) -> int:
        """How many of the key's compiles have killed their worker since it was last served."""
        return self._crashes.get(key, 0)

    def record_timeout(self, key: K, now: float) -> Marker:
        self.metrics.count(Counter.COMPILE_TIMEOUTS)
        count = self._count(self._timeouts, key)
        limit = self._settings.compile_timeout_s
        if count > self._settings.max_retries:
            self.metrics.count(Counter.ESCALATIONS)
            retries = f"{count - 1} retr{'y' if count == 2 else 'ies'}"
            message = (
                f"grammar compile timed out ({limit:g} s limit) {count} times; "
                f"gave up after {retries}: retrying will not help, "
                "simplify the grammar (for example smaller maxLength or maxItems)"
            )
            return Marker(message, expires_at=None)
        ttl = self._settings.ttl_s
        message = (
            f"grammar compile timed out ({limit:g} s limit); it goes on in the background "
            f"and a retry after {ttl:g} s may be served from the cache"
        )
        return Marker(message, expires_at=now + ttl)

    def record_crash(self, entry: Entry[K, V], crash: CompileCrashedError, now: float) -> None:
        """Settle an entry whose compile's worker died: a marker, or the grammar's own error."""
        job = entry.job
        count = self._count(self._crashes, job.key)
        if count > self._settings.max_retries:
            self.metrics.count(Counter.ESCALATIONS)
            entry.marker = None
            job.error = InvalidGrammarError(
                f"the grammar's compile killed its worker {count} times (last: {crash}): "
                "the grammar is the likely cause; simplify it"
            )
            return
        ttl = self._settings.ttl_s
        entry.marker = Marker(
            f"{crash}; a retry after {ttl:g} s compiles the grammar again",
            expires_at=now + ttl,
            crashed=True,
        )
        job.error = marker_error(entry.marker, now, prefix="", waited_s=0.0)

    def _count(self, counts: OrderedDict[K, int], key: K) -> int:
        """Count one more failure of ``key``; only the most recently failed keys are kept."""
        count = counts.pop(key, 0) + 1
        counts[key] = count
        while len(counts) > self._settings.max_tracked_keys:
            counts.popitem(last=False)
        return count

    def forget(self, key: K) -> None:
        """The key was served: its transient failures start again from nothing."""
        self._timeouts.pop(key, None)
        self._crashes.pop(key, None)

    def clear(self) -> None:
        self._timeouts.clear()
        self._crashes.clear()
