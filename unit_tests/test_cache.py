"""CompileCache: one compile per key, shared results and errors, bounded finished entries.

Compiles are held in flight with ``threading.Event`` gates; nothing here
sleeps or measures time. ``HANG_GUARD_S`` only turns a hang (a bug) into a
test failure instead of a stuck test run.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from grammar_guard.core.cache import CompileCache
from grammar_guard.core.errors import InvalidGrammarError

HANG_GUARD_S = 30.0


class FakeCompiler:
    """Counts compiles per key; a key can be held in flight or made to fail."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}
        self.errors: dict[str, Exception] = {}

    def hold(self, key: str) -> threading.Event:
        """Make compiles of ``key`` wait until the returned event is set."""
        gate = self.gates[key] = threading.Event()
        self.started[key] = threading.Event()
        return gate

    def __call__(self, key: str) -> str:
        with self._lock:
            self.calls[key] += 1
        if key in self.started:
            self.started[key].set()
        gate = self.gates.get(key)
        if gate is not None:
            assert gate.wait(HANG_GUARD_S), f"test never released {key}"
        if key in self.errors:
            raise self.errors[key]
        return f"compiled:{key}"


class InlineExecutor(Executor):
    """Runs each submitted call at once, in the caller's thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class QueueExecutor(Executor):
    """Queues submitted calls until the test runs them."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.queue.append((fn, args))
        return Future()

    def run_all(self) -> None:
        while self.queue:
            fn, args = self.queue.pop(0)
            fn(*args)


class RefusingOnceExecutor(InlineExecutor):
    """Refuses its first submission the way a shut-down ThreadPoolExecutor does."""

    def __init__(self) -> None:
        self.refused = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if not self.refused:
            self.refused = True
            raise RuntimeError("cannot schedule new futures after shutdown")
        return super().submit(fn, *args, **kwargs)


@pytest.fixture
def compiler() -> FakeCompiler:
    return FakeCompiler()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-compile")
    yield executor
    executor.shutdown(wait=True, cancel_futures=True)


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Start ``count`` threads that call ``target(i)`` together; re-raise the first error."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(HANG_GUARD_S)
            target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive(), "a racing thread hung"
    if errors:
        raise errors[0]


# --- one compile per key ----------------------------------------------------------


def test_racing_gets_share_one_compile(compiler: FakeCompiler, pool: ThreadPoolExecutor) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=8)
    gate = compiler.hold("k")
    futures: list[Future[str] | None] = [None] * 64

    def get(index: int) -> None:
        futures[index] = cache.get("k")

    run_threads(64, get)
    # Every caller has its future while the one compile is still held.
    assert compiler.started["k"].wait(HANG_GUARD_S)
    assert not any(f is None or f.done() for f in futures)
    gate.set()
    results = {f.result(HANG_GUARD_S) for f in futures if f is not None}
    assert results == {"compiled:k"}
    assert len({id(f) for f in futures}) == 1
    assert compiler.calls == Counter({"k": 1})


def test_many_keys_compile_once_each(compiler: FakeCompiler, pool: ThreadPoolExecutor) -> None:
    keys = [f"key{i}" for i in range(16)]
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=64)
    results: dict[int, str] = {}

    def get(index: int) -> None:
        key = keys[index % len(keys)]
        results[index] = cache.get(key).result(HANG_GUARD_S)

    run_threads(64, get)
    assert all(results[i] == f"compiled:{keys[i % len(keys)]}" for i in range(64))
    assert compiler.calls == Counter({key: 1 for key in keys})
    assert len(cache) == len(keys)
    # Later requests hit the cache.
    assert cache.get("key3").result(HANG_GUARD_S) == "compiled:key3"
    assert compiler.calls["key3"] == 1


# --- errors -------------------------------------------------------------------------


def test_invalid_grammar_is_cached_and_refused_at_once(
    compiler: FakeCompiler, pool: ThreadPoolExecutor
) -> None:
    compiler.errors["bad"] = InvalidGrammarError("regex: unclosed '['")
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=8)
    first = cache.get("bad")
    with pytest.raises(InvalidGrammarError, match="unclosed"):
        first.result(HANG_GUARD_S)
    again = cache.get("bad")
    # Already finished: the caller gets the stored error without waiting for a compile.
    assert again.done()
    error = again.exception(0)
    assert isinstance(error, InvalidGrammarError)
    assert error.reason == "regex: unclosed '['"
    assert compiler.calls["bad"] == 1


def test_unexpected_exception_becomes_invalid_grammar_for_every_waiter(
    compiler: FakeCompiler, pool: ThreadPoolExecutor
) -> None:
    compiler.errors["k"] = RuntimeError("boom")
    gate = compiler.hold("k")
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=8)
    seen: list[BaseException | None] = [None] * 8
    waiting = threading.Barrier(9)

    def wait_for_it(index: int) -> None:
        future = cache.get("k")
        waiting.wait(HANG_GUARD_S)
        seen[index] = future.exception(HANG_GUARD_S)

    waiters = [threading.Thread(target=wait_for_it, args=(i,)) for i in range(8)]
    for thread in waiters:
        thread.start()
    waiting.wait(HANG_GUARD_S)  # every waiter holds the in-flight future
    gate.set()
    for thread in waiters:
        thread.join(HANG_GUARD_S)
        assert not thread.is_alive(), "a waiter hung"
    for error in seen:
        assert isinstance(error, InvalidGrammarError)
        assert "boom" in str(error)
    # The failure is remembered like any other compile result.
    later = cache.get("k")
    assert later.done()
    assert isinstance(later.exception(0), InvalidGrammarError)
    assert compiler.calls["k"] == 1


def test_unexpected_exception_on_inline_executor() -> None:
    def explode(key: str) -> str:
        raise KeyError(f"missing rule {key}")

    cache: CompileCache[str, str] = CompileCache(explode, InlineExecutor(), max_entries=2)
    with pytest.raises(InvalidGrammarError, match="missing rule k"):
        cache.get("k").result(0)


# --- bounded size -------------------------------------------------------------------


def test_max_entries_must_be_positive(compiler: FakeCompiler) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        CompileCache(compiler, InlineExecutor(), max_entries=0)


def test_least_recently_used_finished_entry_is_evicted(compiler: FakeCompiler) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, InlineExecutor(), max_entries=2)
    cache.get("a")
    cache.get("b")
    cache.get("a")  # a is now more recent than b
    cache.get("c")  # over the bound: b goes
    assert len(cache) == 2
    assert compiler.calls == Counter({"a": 1, "b": 1, "c": 1})

    assert cache.get("a").result(0) == "compiled:a"  # still cached; a is most recent
    assert compiler.calls["a"] == 1
    assert cache.get("b").result(0) == "compiled:b"  # evicted: compiled again; c goes
    assert compiler.calls["b"] == 2
    assert len(cache) == 2
    cache.get("a")
    assert compiler.calls["a"] == 1
    cache.get("c")
    assert compiler.calls["c"] == 2


def test_in_flight_entries_are_never_evicted(
    compiler: FakeCompiler, pool: ThreadPoolExecutor
) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=2)
    gates = {key: compiler.hold(key) for key in "abc"}
    held = {key: cache.get(key) for key in "abc"}
    for key in "abc":
        assert compiler.started[key].wait(HANG_GUARD_S)
    assert len(cache) == 3  # over the bound, but nothing is finished
    for key in "abc":
        assert cache.get(key) is held[key]
    for gate in gates.values():
        gate.set()
    assert {key: f.result(HANG_GUARD_S) for key, f in held.items()} == {
        key: f"compiled:{key}" for key in "abc"
    }
    assert compiler.calls == Counter({"a": 1, "b": 1, "c": 1})


def test_in_flight_lru_entry_survives_while_a_finished_one_goes(
    compiler: FakeCompiler, pool: ThreadPoolExecutor
) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=1)
    gate = compiler.hold("slow")
    slow = cache.get("slow")  # least recently used, and in flight
    assert compiler.started["slow"].wait(HANG_GUARD_S)
    assert cache.get("fast").result(HANG_GUARD_S) == "compiled:fast"
    assert cache.get("other").result(HANG_GUARD_S) == "compiled:other"
    assert cache.get("slow") is slow  # not evicted: no second compile
    cache.get("fast").result(HANG_GUARD_S)
    assert compiler.calls["fast"] == 2  # the finished entry was the one evicted
    gate.set()
    assert slow.result(HANG_GUARD_S) == "compiled:slow"
    assert compiler.calls["slow"] == 1


# --- clear ----------------------------------------------------------------------------


def test_clear_forgets_finished_entries(compiler: FakeCompiler) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, InlineExecutor(), max_entries=4)
    cache.get("a")
    compiler.errors["bad"] = InvalidGrammarError("bad")
    cache.get("bad")
    cache.clear()
    assert len(cache) == 0
    cache.get("a")
    cache.get("bad")
    assert compiler.calls == Counter({"a": 2, "bad": 2})


def test_clear_still_resolves_in_flight_waiters(
    compiler: FakeCompiler, pool: ThreadPoolExecutor
) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=4)
    gate = compiler.hold("a")
    waiting = cache.get("a")
    assert compiler.started["a"].wait(HANG_GUARD_S)
    cache.clear()
    gate.set()
    assert waiting.result(HANG_GUARD_S) == "compiled:a"


def test_clear_keeps_in_flight_entries(compiler: FakeCompiler, pool: ThreadPoolExecutor) -> None:
    # clear() is documented to forget *finished* entries: a request arriving
    # while a compile is in flight must join it, not start a second compile.
    cache: CompileCache[str, str] = CompileCache(compiler, pool, max_entries=4)
    gate = compiler.hold("a")
    waiting = cache.get("a")
    assert compiler.started["a"].wait(HANG_GUARD_S)
    cache.clear()
    joined = cache.get("a")
    gate.set()
    assert joined.result(HANG_GUARD_S) == "compiled:a"
    assert waiting.result(HANG_GUARD_S) == "compiled:a"
    assert joined is waiting
    assert compiler.calls["a"] == 1


# --- cancellation and refused submission ------------------------------------------------


def test_cancelled_future_lets_the_next_get_compile(compiler: FakeCompiler) -> None:
    executor = QueueExecutor()
    cache: CompileCache[str, str] = CompileCache(compiler, executor, max_entries=4)
    first = cache.get("a")
    assert first.cancel()
    executor.run_all()  # the queued compile sees the cancellation and skips
    assert compiler.calls["a"] == 0
    second = cache.get("a")
    assert second is not first
    assert not second.cancelled()
    executor.run_all()
    assert second.result(0) == "compiled:a"
    assert compiler.calls["a"] == 1


def test_get_right_after_cancel_is_not_served_the_cancelled_future(
    compiler: FakeCompiler,
) -> None:
    executor = QueueExecutor()
    cache: CompileCache[str, str] = CompileCache(compiler, executor, max_entries=4)
    first = cache.get("a")
    assert first.cancel()
    # The next request arrives before the executor has reached the queued compile.
    second = cache.get("a")
    executor.run_all()
    assert not second.cancelled()
    try:
        assert second.result(0) == "compiled:a"
    except CancelledError:
        pytest.fail("a new request got the earlier caller's cancellation")
    assert compiler.calls["a"] == 1


def test_refused_submission_does_not_strand_the_key(compiler: FakeCompiler) -> None:
    cache: CompileCache[str, str] = CompileCache(compiler, RefusingOnceExecutor(), max_entries=4)
    refused = cache.get("a")
    with pytest.raises(RuntimeError, match="shutdown"):
        refused.result(0)
    # The next request must get a compile, not a future nobody will ever resolve.
    retry = cache.get("a")
    assert retry.done()
    assert retry.result(0) == "compiled:a"
