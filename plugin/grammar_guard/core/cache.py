"""Compile cache: one compile per key, results shared, finished entries bounded.

Every request for a key shares one ``Future``: the first caller schedules the
compile on the given executor, later callers get the same future whether the
compile is queued, running or finished. Compile errors are stored like
results, so an invalid grammar is compiled once and then refused at once with
its original reason. Any other exception from the compile function is turned
into an :class:`InvalidGrammarError` carrying its text, so no waiter ever sees
an unexpected exception type or hangs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar

from grammar_guard.core.errors import InvalidGrammarError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CompileCache(Generic[K, V]):
    def __init__(
        self, compile_fn: Callable[[K], V], executor: Executor, *, max_entries: int
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._compile_fn = compile_fn
        self._executor = executor
        self._max_entries = max_entries
        self._lock = threading.Lock()
        # Least recently used first.
        self._entries: OrderedDict[K, Future[V]] = OrderedDict()

    def get(self, key: K) -> Future[V]:
        with self._lock:
            future = self._entries.get(key)
            if future is not None and not future.cancelled():
                self._entries.move_to_end(key)
                return future
            future = Future()
            self._entries[key] = future
            self._evict_finished()
        try:
            self._executor.submit(self._compile_into, key, future)
        except RuntimeError as exc:  # the executor is shut down
            self._forget(key, future)
            future.set_exception(exc)
        return future

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        """Forget finished entries; in-flight ones stay so their key still compiles once."""
        with self._lock:
            for key in [k for k, f in self._entries.items() if f.done()]:
                del self._entries[key]

    def _forget(self, key: K, future: Future[V]) -> None:
        with self._lock:
            if self._entries.get(key) is future:
                del self._entries[key]

    def _evict_finished(self) -> None:
        # In-flight entries are never evicted: their waiters and the
        # one-compile-per-key promise depend on them staying findable.
        excess = len(self._entries) - self._max_entries
        if excess <= 0:
            return
        for key in [k for k, f in self._entries.items() if f.done()][:excess]:
            del self._entries[key]

    def _compile_into(self, key: K, future: Future[V]) -> None:
        if not future.set_running_or_notify_cancel():
            # A caller cancelled the shared future; the next request compiles anew.
            self._forget(key, future)
            return
        try:
            value = self._compile_fn(key)
        except InvalidGrammarError as exc:
            future.set_exception(exc)
        except Exception as exc:
            future.set_exception(InvalidGrammarError(f"grammar compile failed: {exc}"))
        else:
            future.set_result(value)
