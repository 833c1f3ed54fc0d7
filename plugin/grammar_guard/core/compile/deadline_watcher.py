"""The thread that ends requests' waits when their deadline is due."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, TypeVar

from grammar_guard.core.compile.cache_entries import Clock

if TYPE_CHECKING:
    from grammar_guard.core.compile.cache import GrammarCache

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


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
