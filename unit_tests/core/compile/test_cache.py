"""GrammarCache: every rule of the compile cache (docs/compile-cache.md) and its gaps.

Time is a :class:`FakeClock` the tests move by hand; compiles run when the test
says so (``ManualExecutor``) or on real threads held by gates. Nothing sleeps,
nothing measures elapsed time. ``HANG_GUARD_S`` only turns a hang (a bug) into
a failure instead of a stuck run.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from grammar_guard.core.compile.cache import GrammarCache
from grammar_guard.core.compile.deadline_watcher import DeadlineWatcher
from grammar_guard.core.errors import (
    CompileCrashedError,
    CompileTimeoutError,
    InvalidGrammarError,
)
from grammar_guard.core.metrics import Counter, Gauge
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import Settings

HANG_GUARD_S = 30.0
T = 30.0  # compile timeout used throughout
SETTINGS = Settings(compile_timeout_s=T, max_retries=2, max_entries=64, max_bytes=10_000)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeCompiler:
    """Counts compiles per key; a key can fail, run a hook mid-compile, or wait on a gate."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Tally[str] = Tally()
        self.errors: dict[str, BaseException] = {}
        self.during: dict[str, Callable[[], None]] = {}
        self.gates: dict[str, threading.Event] = {}
        self.started: dict[str, threading.Event] = {}

    def hold(self, key: str) -> threading.Event:
        gate = self.gates[key] = threading.Event()
        self.started[key] = threading.Event()
        return gate

    def __call__(self, key: str) -> str:
        with self._lock:
            self.calls[key] += 1
        if key in self.started:
            self.started[key].set()
        if key in self.gates:
            assert self.gates[key].wait(HANG_GUARD_S), f"test never released {key}"
        if key in self.during:
            self.during.pop(key)()
        if key in self.errors:
            raise self.errors[key]
        return f"compiled:{key}"


class ManualExecutor(Executor):
    """Queues submitted compiles until the test runs them, in the test's thread."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.refuse = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.refuse:
            raise RuntimeError("cannot schedule new futures after shutdown")
        self.queue.append((fn, args))
        return Future()

    def run_next(self) -> None:
        fn, args = self.queue.pop(0)
        fn(*args)

    def run_last(self) -> None:
        """Run the compile queued last, ahead of the others."""
        fn, args = self.queue.pop()
        fn(*args)


class Harness:
    def __init__(self, settings: Settings = SETTINGS, executor: Executor | None = None):
        self.clock = FakeClock()
        self.compiler = FakeCompiler()
        self.executor = executor or ManualExecutor()
        self.cache: GrammarCache[str, str] = GrammarCache(
            self.compiler,
            self.executor,
            settings,
            size_of=lambda value: 1000 if "big" in value else 100,
            clock=self.clock,
        )

    @property
    def manual(self) -> ManualExecutor:
        assert isinstance(self.executor, ManualExecutor)
        return self.executor

    def metric(self, counter: Counter) -> int:
        return self.cache.metrics.snapshot().counters[counter]

    def time_out_once(self, key: str) -> Future[str]:
        """Admit ``key``, let its compile sit queued past the deadline; return the future."""
        future = self.cache.admit(key).future
        self.clock.advance(T)
        self.cache.expire_due()
        return future


def timeout_of(future: Future[str]) -> CompileTimeoutError:
    error = future.exception(timeout=0)
    assert isinstance(error, CompileTimeoutError), error
    return error


KILLED = "the grammar compile process died (signal 9: Killed)"


def crash_once(h: Harness, key: str, waiters: int = 1) -> list[Future[str]]:
    """Admit ``key`` ``waiters`` times and run its compile, whose worker dies; the futures."""
    futures = [h.cache.admit(key).future for _ in range(waiters)]
    h.compiler.errors[key] = CompileCrashedError(KILLED)
    h.manual.run_last()
    del h.compiler.errors[key]
    return futures


def crash_of(future: Future[str]) -> CompileCrashedError:
    error = future.exception(timeout=0)
    assert isinstance(error, CompileCrashedError), error
    return error


@pytest.fixture
def h() -> Harness:
    return Harness()


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


# --- rule 1: the key ---------------------------------------------------------------


def test_equivalent_json_spellings_share_one_compile() -> None:
    compiled: Tally[GrammarSpec] = Tally()

    def compile_spec(spec: GrammarSpec) -> str:
        compiled[spec] += 1
        return spec.text

    executor = ManualExecutor()
    cache: GrammarCache[GrammarSpec, str] = GrammarCache(compile_spec, executor, SETTINGS)
    options = CompileOptions(any_whitespace=False)
    spaced = GrammarSpec.build(RequestKind.JSON_SCHEMA, '{ "type": "integer" }', options)
    compact = GrammarSpec.build(RequestKind.JSON_SCHEMA, '{"type":"integer"}', options)
    reordered = GrammarSpec.build(
        RequestKind.JSON_SCHEMA, '{"properties":{"b":{},"a":{}}}', options
    )
    ordered = GrammarSpec.build(RequestKind.JSON_SCHEMA, '{"properties":{"a":{},"b":{}}}', options)
    futures = [cache.admit(spec).future for spec in (spaced, compact, reordered, ordered)]
    while executor.queue:
        executor.run_next()
    assert [f.result(timeout=0) for f in futures[:2]] == ['{"type":"integer"}'] * 2
    assert sorted(compiled.values()) == [1, 1, 1]  # property order is meaning: two keys


# --- rule 2: hits -----------------------------------------------------------------


def test_finished_entry_answers_at_once(h: Harness) -> None:
    first = h.cache.admit("k")
    assert not first.future.done()
    h.manual.run_next()
    assert first.future.result(timeout=0) == "compiled:k"
    second = h.cache.admit("k")
    assert second.hit and second.future.result(timeout=0) == "compiled:k"
    assert h.compiler.calls["k"] == 1


def test_invalid_entry_answers_at_once_with_the_original_reason(h: Harness) -> None:
    h.compiler.errors["bad"] = InvalidGrammarError("unknown type 'strnig'")
    h.cache.admit("bad")
    h.manual.run_next()
    h.clock.advance(10 * T)
    again = h.cache.admit("bad")
    assert again.hit
    with pytest.raises(InvalidGrammarError, match="unknown type 'strnig'"):
        again.future.result(timeout=0)


# --- rule 3: one compile per key ---------------------------------------------------


def test_a_thousand_racing_requests_cause_one_compile(pool: ThreadPoolExecutor) -> None:
    h = Harness(executor=pool)
    gate = h.compiler.hold("k")
    futures: list[Future[str]] = []
    run_threads(1000, lambda _i: futures.append(h.cache.admit("k").future))
    assert h.compiler.started["k"].wait(HANG_GUARD_S)
    gate.set()
    assert {f.result(timeout=HANG_GUARD_S) for f in futures} == {"compiled:k"}
    assert h.compiler.calls["k"] == 1
    assert h.metric(Counter.MISSES) == 1 and h.metric(Counter.HITS) == 999


def test_racing_requests_on_many_keys_compile_each_once(pool: ThreadPoolExecutor) -> None:
    h = Harness(executor=pool)
    futures: dict[int, Future[str]] = {}
    lock = threading.Lock()

    def request(i: int) -> None:
        future = h.cache.admit(f"k{i % 25}").future
        with lock:
            futures[i] = future

    run_threads(400, request)
    for i, future in futures.items():
        assert future.result(timeout=HANG_GUARD_S) == f"compiled:k{i % 25}"
    assert h.compiler.calls == Tally({f"k{i}": 1 for i in range(25)})


# --- rule 4: start time ------------------------------------------------------------


def test_start_time_is_when_a_worker_picks_the_compile_up(h: Harness) -> None:
    h.cache.admit("k")
    assert h.cache.compile_started_at("k") is None  # queued
    h.clock.advance(7)
    picked_up = h.clock.now
    h.manual.run_next()
    assert h.cache.compile_started_at("k") == picked_up  # still readable once finished


# --- rule 5: two-phase timeout -----------------------------------------------------


def test_a_queued_request_times_out_after_t(h: Harness) -> None:
    future = h.cache.admit("k").future
    h.clock.advance(T - 0.5)
    h.cache.expire_due()
    assert not future.done()
    h.clock.advance(0.5)
    h.cache.expire_due()
    error = timeout_of(future)
    assert "30.0 s queued, 0.0 s compiling" in str(error)


def test_a_started_compile_gets_a_fresh_t(h: Harness) -> None:
    future = h.cache.admit("k").future

    def at_start_plus_almost_two_t() -> None:
        h.clock.advance(T - 1)  # compile phase, past the request's first deadline
        assert h.cache.expire_due() is not None
        assert not future.done()
        h.clock.advance(1)
        h.cache.expire_due()

    h.clock.advance(T - 1)  # queued almost T
    h.compiler.during["k"] = at_start_plus_almost_two_t
    h.manual.run_next()
    error = timeout_of(future)
    assert error.waited_s == pytest.approx(2 * T - 1)  # worst case about 2T, never more
    assert "29.0 s queued, 30.0 s compiling" in str(error)


def test_a_request_joining_a_running_compile_waits_t_from_its_start(h: Harness) -> None:
    first = h.cache.admit("k").future
    joined: list[Future[str]] = []

    def join_late_then_expire() -> None:
        h.clock.advance(20)
        joined.append(h.cache.admit("k").future)
        h.clock.advance(T - 20)
        h.cache.expire_due()

    h.compiler.during["k"] = join_late_then_expire
    h.manual.run_next()
    assert isinstance(first.exception(timeout=0), CompileTimeoutError)
    assert isinstance(joined[0].exception(timeout=0), CompileTimeoutError)


def test_next_deadline_is_reported_for_the_watcher(h: Harness) -> None:
    assert h.cache.expire_due() is None
    h.cache.admit("k")
    assert h.cache.expire_due() == h.clock.now + T


# --- rule 6: a finish that races the deadline wins ---------------------------------


def test_a_compile_finished_at_the_deadline_admits_the_request(h: Harness) -> None:
    future = h.cache.admit("k").future
    h.clock.advance(T)  # deadline reached, but the watcher has not run yet
    h.manual.run_next()
    h.cache.expire_due()
    assert future.result(timeout=0) == "compiled:k"
    assert h.metric(Counter.COMPILE_TIMEOUTS) == 0


# --- rule 7: compile errors are permanent ------------------------------------------


def test_compile_error_is_compiled_once_and_never_expires(h: Harness) -> None:
    h.compiler.errors["bad"] = InvalidGrammarError("bad regex")
    first = h.cache.admit("bad").future
    h.manual.run_next()
    with pytest.raises(InvalidGrammarError, match="bad regex"):
        first.result(timeout=0)
    for _ in range(3):
        h.clock.advance(1e6)
        with pytest.raises(InvalidGrammarError, match="bad regex"):
            h.cache.admit("bad").future.result(timeout=0)
    assert h.compiler.calls["bad"] == 1 and not h.manual.queue


# --- rule 8: timeouts are transient, then permanent --------------------------------


def test_timeout_marker_refuses_at_once_until_its_ttl_then_the_key_compiles_again(
    h: Harness,
) -> None:
    timeout_of(h.time_out_once("k"))
    h.clock.advance(T - 1)
    early = timeout_of(h.cache.admit("k").future)
    assert not early.permanent and early.retry_after_s == pytest.approx(1)
    assert len(h.manual.queue) == 1  # nothing new was scheduled
    h.clock.advance(1)
    retry = h.cache.admit("k")
    assert not retry.future.done() and len(h.manual.queue) == 2


def test_ttl_can_differ_from_the_timeout() -> None:
    h = Harness(Settings(compile_timeout_s=T, timeout_ttl_s=5))
    h.time_out_once("k")
    h.clock.advance(5)
    assert not h.cache.admit("k").future.done()  # marker gone: a new attempt waits


def test_escalates_to_permanent_after_more_than_n_timeouts(h: Harness) -> None:
    for attempt in range(1, SETTINGS.max_retries + 2):
        error = timeout_of(h.time_out_once("k"))
        assert h.cache.timeouts_of("k") == attempt
        h.clock.advance(T)  # let the marker expire
    assert error.permanent and error.retry_after_s is None
    assert "3 times; gave up after 2 retries" in str(error)
    h.clock.advance(1e6)
    late = timeout_of(h.cache.admit("k").future)
    assert late.permanent and "gave up after 2 retries" in str(late)
    assert h.metric(Counter.ESCALATIONS) == 1
    assert h.metric(Counter.COMPILE_TIMEOUTS) == 3


def test_every_waiter_of_one_timed_out_compile_counts_once(h: Harness) -> None:
    futures = [h.cache.admit("k").future for _ in range(5)]
    h.clock.advance(T)
    h.cache.expire_due()
    assert all(isinstance(f.exception(timeout=0), CompileTimeoutError) for f in futures)
    assert h.cache.timeouts_of("k") == 1 and h.metric(Counter.COMPILE_TIMEOUTS) == 1


def test_a_waiter_timing_out_after_the_marker_expired_does_not_count_again(h: Harness) -> None:
    first = h.cache.admit("k").future
    h.clock.advance(T / 2)
    second = h.cache.admit("k").future  # joins; its queued deadline is later

    counts: list[int] = []

    def finish_the_second_deadline() -> None:
        h.clock.advance(T)  # first's marker has expired by now
        h.cache.expire_due()
        counts.append(h.cache.timeouts_of("k"))

    h.clock.advance(T / 2)
    h.cache.expire_due()
    assert isinstance(first.exception(timeout=0), CompileTimeoutError)
    h.compiler.during["k"] = finish_the_second_deadline
    h.manual.run_next()
    assert isinstance(second.exception(timeout=0), CompileTimeoutError)
    assert counts == [1]
    assert h.cache.timeouts_of("k") == 0  # then the compile succeeded (rule 12)


# --- a worker's death is transient, then permanent --------------------------------


def test_a_crash_gives_every_waiter_a_transient_error_saying_when_to_retry(h: Harness) -> None:
    for future in crash_once(h, "k", waiters=3):
        error = crash_of(future)
        assert str(error) == f"{KILLED}; a retry after 30 s compiles the grammar again"
        assert error.retry_after_s == pytest.approx(T)
    assert h.cache.crashes_of("k") == 1
    assert h.metric(Counter.COMPILE_CRASHES) == 1 and h.metric(Counter.COMPILE_ERRORS) == 0


def test_a_crash_marker_refuses_at_once_until_its_ttl_then_the_key_compiles_again(
    h: Harness,
) -> None:
    crash_once(h, "k")
    h.clock.advance(T - 1)
    early = h.cache.admit("k")
    assert early.hit and crash_of(early.future).retry_after_s == pytest.approx(1)
    assert not h.manual.queue  # nothing new was scheduled
    h.clock.advance(1)
    retry = h.cache.admit("k")
    assert not retry.future.done() and len(h.manual.queue) == 1
    h.manual.run_next()
    assert retry.future.result(timeout=0) == "compiled:k"
    assert h.cache.admit("k").future.result(timeout=0) == "compiled:k"
    assert h.compiler.calls["k"] == 2
    assert h.cache.crashes_of("k") == 0  # served: the count starts again


def test_escalates_to_a_permanent_refusal_after_more_than_n_crashes(h: Harness) -> None:
    for attempt in range(1, SETTINGS.max_retries + 1):
        crash_of(crash_once(h, "k")[0])
        assert h.cache.crashes_of("k") == attempt
        h.clock.advance(T)  # let the marker expire
    (last,) = crash_once(h, "k")
    expected = (
        f"the grammar's compile killed its worker 3 times (last: {KILLED}): "
        "the grammar is the likely cause; simplify it"
    )
    with pytest.raises(InvalidGrammarError) as error:
        last.result(timeout=0)
    assert error.value.reason == expected
    h.clock.advance(1e6)
    late = h.cache.admit("k")
    assert late.hit and str(late.future.exception(timeout=0)) == expected
    assert not h.manual.queue and h.compiler.calls["k"] == 3
    assert h.metric(Counter.ESCALATIONS) == 1 and h.metric(Counter.COMPILE_CRASHES) == 3


def test_a_crash_touches_no_other_key(h: Harness) -> None:
    fill(h, "ready")
    h.time_out_once("timed-out")
    h.manual.run_next()  # lands behind its fresh marker
    in_flight = h.cache.admit("in-flight").future
    size, entries = h.cache.size_bytes, len(h.cache)
    crash_once(h, "k")
    assert len(h.cache) == entries + 1 and h.cache.size_bytes > size  # nothing evicted
    assert h.cache.admit("ready").future.result(timeout=0) == "compiled:ready"
    assert isinstance(h.cache.admit("timed-out").future.exception(timeout=0), CompileTimeoutError)
    assert h.cache.timeouts_of("timed-out") == 1
    h.manual.run_next()
    assert in_flight.result(timeout=0) == "compiled:in-flight"
    assert h.metric(Counter.EVICTIONS) == 0
    assert [h.cache.crashes_of(key) for key in ("ready", "timed-out", "in-flight")] == [0, 0, 0]


def test_a_crash_after_a_timeout_replaces_its_marker(h: Harness) -> None:
    h.time_out_once("k")
    h.compiler.errors["k"] = CompileCrashedError(KILLED)
    h.manual.run_next()
    assert crash_of(h.cache.admit("k").future).retry_after_s == pytest.approx(T)


def test_a_crashed_orphan_resolves_its_own_waiters_and_counts_nothing(h: Harness) -> None:
    old = h.cache.admit("k").future
    h.cache.reset()
    new = h.cache.admit("k").future
    h.compiler.errors["k"] = CompileCrashedError(KILLED)
    h.manual.run_next()  # the orphan's worker dies
    del h.compiler.errors["k"]
    assert str(crash_of(old)) == KILLED
    assert h.cache.crashes_of("k") == 0 and not new.done()
    h.manual.run_next()
    assert new.result(timeout=0) == "compiled:k"


# --- rule 9: spurious timeouts are harmless ----------------------------------------


def test_timeout_against_a_key_holding_a_valid_grammar_admits_and_counts_nothing(
    h: Harness,
) -> None:
    orphaned = h.cache.admit("k").future
    h.cache.reset()  # the first compile becomes an orphan, still queued
    h.cache.admit("k")
    h.manual.queue.reverse()
    h.manual.run_next()  # the new compile lands first
    h.clock.advance(T)
    h.cache.expire_due()
    assert orphaned.result(timeout=0) == "compiled:k"
    assert h.cache.timeouts_of("k") == 0 and h.metric(Counter.COMPILE_TIMEOUTS) == 0


# --- rule 10: a fresh marker beats a late success ----------------------------------


def test_late_success_does_not_replace_a_fresh_marker_but_serves_once_it_expires(
    h: Harness,
) -> None:
    timeout_of(h.time_out_once("k"))
    h.manual.run_next()  # the compile lands while the marker is fresh
    assert isinstance(h.cache.admit("k").future.exception(timeout=0), CompileTimeoutError)
    h.clock.advance(T)
    served = h.cache.admit("k")
    assert served.hit and served.future.result(timeout=0) == "compiled:k"
    assert h.compiler.calls["k"] == 1  # rule 13: the timed-out compile was kept


def test_success_landing_after_the_marker_expired_replaces_it(h: Harness) -> None:
    timeout_of(h.time_out_once("k"))
    h.clock.advance(T)
    h.manual.run_next()
    assert h.cache.admit("k").future.result(timeout=0) == "compiled:k"


# --- rule 11: orphans resolve ------------------------------------------------------


def test_marker_expiring_mid_compile_starts_a_new_compile_and_the_orphan_touches_nothing(
    h: Harness,
) -> None:
    orphan_waiter: list[Future[str]] = []
    fresh: list[Future[str]] = []

    def while_the_first_compile_runs() -> None:
        h.clock.advance(T)
        h.cache.expire_due()  # the first request times out
        h.clock.advance(T)  # its marker expires
        orphan_waiter.append(h.cache.admit("k").future)  # a second compile is queued
        fresh.append(h.cache.admit("k").future)
        assert orphan_waiter[0] is not fresh[0]

    h.compiler.during["k"] = while_the_first_compile_runs
    first = h.cache.admit("k").future
    h.manual.run_next()  # the first compile finishes as an orphan
    assert isinstance(first.exception(timeout=0), CompileTimeoutError)
    assert not fresh[0].done()  # the new entry is still in flight, untouched
    assert h.cache.timeouts_of("k") == 1
    h.manual.run_next()
    assert fresh[0].result(timeout=0) == "compiled:k"
    assert h.compiler.calls["k"] == 2


def test_orphan_after_reset_resolves_its_own_waiters(h: Harness) -> None:
    old = h.cache.admit("k").future
    h.cache.reset()
    new = h.cache.admit("k").future
    h.compiler.errors["k"] = InvalidGrammarError("only the second compile fails")
    h.manual.queue.reverse()
    h.manual.run_next()  # new compile: fails
    del h.compiler.errors["k"]
    h.manual.run_next()  # orphan: succeeds
    assert old.result(timeout=0) == "compiled:k"
    assert isinstance(new.exception(timeout=0), InvalidGrammarError)
    assert isinstance(h.cache.admit("k").future.exception(timeout=0), InvalidGrammarError)


# --- rule 12: success clears the retry count ---------------------------------------


def test_success_clears_the_retry_count(h: Harness) -> None:
    for _ in range(SETTINGS.max_retries):
        h.time_out_once("k")
        h.clock.advance(T)
    assert h.cache.timeouts_of("k") == SETTINGS.max_retries
    h.cache.admit("k")
    while h.manual.queue:
        h.manual.run_next()
    assert h.cache.admit("k").future.result(timeout=0) == "compiled:k"
    assert h.cache.timeouts_of("k") == 0


def test_retry_count_is_cleared_when_a_kept_result_is_first_served(h: Harness) -> None:
    h.time_out_once("k")
    h.manual.run_next()  # lands while the marker is fresh
    assert h.cache.timeouts_of("k") == 1
    h.clock.advance(T)
    h.cache.admit("k")
    assert h.cache.timeouts_of("k") == 0


# --- rule 13: compiles are never abandoned half-way --------------------------------


def test_a_cancelled_request_does_not_stop_its_compile(h: Harness) -> None:
    aborted = h.cache.admit("k")
    other = h.cache.admit("k")
    assert aborted.future.cancel()
    h.manual.run_next()
    assert other.future.result(timeout=0) == "compiled:k"
    with pytest.raises(CancelledError):
        aborted.future.result(timeout=0)
    assert h.cache.admit("k").hit


# --- gap: exceptions ---------------------------------------------------------------


def test_unexpected_exception_becomes_an_invalid_marker_with_its_text(h: Harness) -> None:
    h.compiler.errors["k"] = RuntimeError("native crash")
    waiters = [h.cache.admit("k").future for _ in range(3)]
    h.manual.run_next()
    for future in [*waiters, h.cache.admit("k").future]:
        error = future.exception(timeout=0)
        assert isinstance(error, InvalidGrammarError)
        assert "RuntimeError: native crash" in str(error)
    assert h.metric(Counter.COMPILE_ERRORS) == 1


def test_an_interrupting_base_exception_still_resolves_every_waiter(h: Harness) -> None:
    class Interrupt(BaseException):
        pass

    h.compiler.errors["k"] = Interrupt()
    waiter = h.cache.admit("k").future
    with pytest.raises(Interrupt):
        h.manual.run_next()
    assert isinstance(waiter.exception(timeout=0), InvalidGrammarError)


def test_a_refused_submission_fails_its_waiters_and_does_not_strand_the_key(h: Harness) -> None:
    h.manual.refuse = True
    failed = h.cache.admit("k").future
    assert isinstance(failed.exception(timeout=0), RuntimeError)
    h.manual.refuse = False
    retry = h.cache.admit("k").future
    h.manual.run_next()
    assert retry.result(timeout=0) == "compiled:k"


# --- gap: no downgrade -------------------------------------------------------------


def test_a_timeout_never_downgrades_a_compile_error(h: Harness) -> None:
    orphaned = h.cache.admit("k").future
    h.cache.reset()
    h.compiler.errors["k"] = InvalidGrammarError("bad grammar")
    h.cache.admit("k")
    h.manual.queue.reverse()
    h.manual.run_next()  # the key now holds a compile error
    h.clock.advance(T)
    h.cache.expire_due()  # the orphan's waiter times out
    assert isinstance(orphaned.exception(timeout=0), InvalidGrammarError)
    assert h.cache.timeouts_of("k") == 0
    h.clock.advance(1e6)
    assert isinstance(h.cache.admit("k").future.exception(timeout=0), InvalidGrammarError)


def test_a_compile_error_landing_after_a_timeout_replaces_the_marker(h: Harness) -> None:
    h.time_out_once("k")
    h.compiler.errors["k"] = InvalidGrammarError("bad grammar")
    h.manual.run_next()
    error = h.cache.admit("k").future.exception(timeout=0)
    assert isinstance(error, InvalidGrammarError)


# --- gap: bounded memory -----------------------------------------------------------


def fill(h: Harness, *keys: str) -> None:
    for key in keys:
        h.cache.admit(key)
        h.manual.run_next()


def test_least_recently_used_entries_go_first_to_stay_under_the_byte_bound() -> None:
    h = Harness(Settings(max_bytes=350, max_entries=100))
    fill(h, "a", "b", "c")  # 100 bytes each
    h.cache.admit("a")  # touch: b is now the least recently used
    fill(h, "d")
    assert h.cache.size_bytes <= 350 and len(h.cache) == 3
    assert h.cache.admit("a").hit and h.cache.admit("d").hit
    assert not h.cache.admit("b").hit
    assert h.metric(Counter.EVICTIONS) >= 1


def test_the_entry_bound_holds_too() -> None:
    h = Harness(Settings(max_bytes=10**9, max_entries=2))
    fill(h, "a", "b", "c")
    assert len(h.cache) == 2 and not h.cache.admit("a").hit


def test_in_flight_entries_are_never_evicted() -> None:
    h = Harness(Settings(max_bytes=150, max_entries=1))
    waiting = h.cache.admit("slow").future
    fill_queue = h.cache.admit("x").future  # both in flight: over the entry bound for now
    assert len(h.cache) == 2
    h.manual.run_next()  # "slow" lands and is over the bound with "x" in flight
    assert waiting.result(timeout=0) == "compiled:slow"
    assert not fill_queue.done() and len(h.cache) == 1  # only the finished one could go


def test_a_grammar_larger_than_the_whole_bound_is_served_but_not_kept() -> None:
    h = Harness(Settings(max_bytes=500, max_entries=10))
    future = h.cache.admit("big").future
    h.manual.run_next()
    assert future.result(timeout=0) == "compiled:big"
    assert h.cache.size_bytes == 0 and len(h.cache) == 0


def test_timeout_bookkeeping_is_bounded() -> None:
    settings = Settings(max_entries=2)
    h = Harness(settings)
    for i in range(3 * settings.max_tracked_keys):
        h.time_out_once(f"k{i}")
    remembered = sum(h.cache.timeouts_of(f"k{i}") for i in range(3 * settings.max_tracked_keys))
    assert remembered == settings.max_tracked_keys


def test_crash_bookkeeping_is_bounded() -> None:
    settings = Settings(max_entries=2)
    h = Harness(settings)
    keys = [f"k{i}" for i in range(3 * settings.max_tracked_keys)]
    for key in keys:
        crash_once(h, key)
    assert sum(h.cache.crashes_of(key) for key in keys) == settings.max_tracked_keys


# --- gap: observability ------------------------------------------------------------


def test_metrics_follow_hits_misses_compiles_errors_sizes_and_compile_time(h: Harness) -> None:
    h.compiler.errors["bad"] = InvalidGrammarError("no")
    h.cache.admit("a")
    h.clock.advance(3)  # queued time is not compile time
    h.compiler.during["a"] = lambda: h.clock.advance(2)
    h.manual.run_next()
    fill(h, "bad")
    h.cache.admit("a")
    h.cache.admit("bad")
    snapshot = h.cache.metrics.snapshot()
    assert snapshot.counters[Counter.MISSES] == 2 and snapshot.counters[Counter.HITS] == 2
    assert snapshot.counters[Counter.COMPILES] == 2
    assert snapshot.counters[Counter.COMPILE_ERRORS] == 1
    assert snapshot.gauges[Gauge.CACHE_ENTRIES] == 2
    assert snapshot.gauges[Gauge.CACHE_BYTES] == h.cache.size_bytes > 100
    assert snapshot.compile_seconds.count == 2
    assert snapshot.compile_seconds.total == pytest.approx(2.0)
    assert snapshot["grammar_guard_compiles_total"] == 2


# --- gap: reset --------------------------------------------------------------------


def test_reset_clears_entries_bytes_and_per_key_counts(h: Harness) -> None:
    fill(h, "a")
    h.time_out_once("slow")
    crash_once(h, "crashed")
    assert h.cache.crashes_of("crashed") == 1
    h.cache.reset()
    assert len(h.cache) == 0 and h.cache.size_bytes == 0
    assert h.cache.timeouts_of("slow") == 0 and h.cache.crashes_of("crashed") == 0
    assert h.cache.metrics.snapshot().gauges[Gauge.CACHE_BYTES] == 0
    assert not h.cache.admit("a").hit


def test_reset_still_resolves_waiters_of_compiles_in_flight(h: Harness) -> None:
    waiting = h.cache.admit("k").future
    h.cache.reset()
    h.manual.run_next()
    assert waiting.result(timeout=0) == "compiled:k"
    assert len(h.cache) == 0  # the orphan's result is not kept


def test_close_fails_every_waiting_request_and_a_late_compile_changes_nothing(
    h: Harness,
) -> None:
    waiting = [h.cache.admit(key).future for key in ("a", "a", "b")]
    h.cache.close("shutting down")
    for future in waiting:
        error = future.exception(timeout=0)
        assert isinstance(error, RuntimeError) and "shutting down" in str(error)
    while h.manual.queue:
        h.manual.run_next()  # compiles that were not cancelled end without effect
    assert len(h.cache) == 0 and h.cache.expire_due(h.clock.now + 10 * T) is None


# --- the deadline watcher ----------------------------------------------------------


def test_the_watcher_thread_fails_requests_whose_deadline_passed() -> None:
    clock = FakeClock()
    watcher = DeadlineWatcher(clock=clock)
    cache: GrammarCache[str, str] = GrammarCache(
        FakeCompiler(), ManualExecutor(), SETTINGS, clock=clock, on_new_deadline=watcher.notify
    )
    watcher.start(cache)
    try:
        future = cache.admit("k").future
        clock.advance(T)
        watcher.notify()
        assert isinstance(future.exception(timeout=HANG_GUARD_S), CompileTimeoutError)
    finally:
        watcher.stop()


def test_threads_racing_on_a_key_whose_marker_expires_mid_compile(
    pool: ThreadPoolExecutor,
) -> None:
    h = Harness(executor=pool)
    first_gate = h.compiler.hold("k")
    first = h.cache.admit("k").future
    assert h.compiler.started["k"].wait(HANG_GUARD_S)
    h.clock.advance(T)
    h.cache.expire_due()
    assert isinstance(first.exception(timeout=HANG_GUARD_S), CompileTimeoutError)
    h.clock.advance(T)  # the marker expires while the first compile still runs
    second_gate = h.compiler.hold("k")
    racers: list[Future[str]] = []
    lock = threading.Lock()

    def admit(_index: int) -> None:
        future = h.cache.admit("k").future
        with lock:
            racers.append(future)

    run_threads(50, admit)
    assert h.compiler.started["k"].wait(HANG_GUARD_S)
    assert h.compiler.calls["k"] == 2  # one new compile for all fifty
    first_gate.set()
    second_gate.set()
    assert {f.result(timeout=HANG_GUARD_S) for f in racers} == {"compiled:k"}
    assert h.compiler.calls["k"] == 2 and h.cache.timeouts_of("k") == 0


# --- upgrades: a second grammar for a served key ---------------------------------


def test_an_upgrade_serves_later_requests_and_charges_its_own_size(h: Harness) -> None:
    first = h.cache.admit("k")
    h.manual.run_next()
    assert h.cache.size_bytes == 100
    assert h.cache.upgrade("k", "big:k")
    assert h.cache.admit("k").future.result(timeout=0) == "big:k"
    assert first.future.result(timeout=0) == "compiled:k"  # the earlier request keeps its own
    assert h.cache.size_bytes == 1000


@pytest.mark.parametrize("state", ["in flight", "invalid", "timed out", "absent"])
def test_only_a_key_served_now_is_upgraded(h: Harness, state: str) -> None:
    if state == "invalid":
        h.compiler.errors["k"] = InvalidGrammarError("no")
    if state == "timed out":
        h.time_out_once("k")
        h.manual.run_next()  # lands behind its fresh marker
    elif state != "absent":
        h.cache.admit("k")
        if state == "invalid":
            h.manual.run_next()
    assert not h.cache.upgrade("k", "other")
    if state == "in flight":
        h.manual.run_next()
        assert h.cache.admit("k").future.result(timeout=0) == "compiled:k"


def test_an_upgrade_over_the_byte_bound_evicts_least_recently_used_entries() -> None:
    h = Harness(Settings(max_bytes=1200, max_entries=100))
    fill(h, "a", "b", "c")
    assert h.cache.upgrade("c", "big:c")  # 100 + 100 + 1000 fits; then a and b
    assert h.cache.size_bytes == 1200
    assert h.cache.upgrade("b", "big:b")  # 2100: a, then c go
    assert h.cache.size_bytes <= 1200 and h.cache.admit("b").hit
