"""The compile path shared by the vLLM backend, the CLI and the benchmarks.

A :class:`CompileService` puts together what turns a :class:`GrammarSpec` into
a compiled grammar under the cache's rules: the compile pool, the
:class:`GrammarCache` with its deadline watcher and metrics, the compiler
(in a thread or in a process) and, when ``GRAMMAR_GUARD_CACHE_DIR`` is set,
the persistent cache. Filling a cache entry runs on the compile pool, like
a compile always did:

1. load the grammar from the cache folder, if a usable file is there;
2. otherwise compile it;
3. once the requests waiting for it have their grammar, store it in the
   folder on a writer thread of its own, so neither those requests nor the
   next compile wait for the disk.

Each key's :class:`CompilePlan` (from the engine, once per key) says which
lane and which compiler it takes and which engine compiles it; a reused key
whose plan names an upgrade is compiled again on that engine in the
background (:mod:`grammar_guard.core.upgrades`).

Compile errors and timeouts are never stored: only a grammar that compiled
is, including one whose requests timed out before it landed, and only when
its load can pay for itself (the store judges, from the compile's time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

from grammar_guard.core.cache import Admission, Clock, DeadlineWatcher, GrammarCache
from grammar_guard.core.compile_threads import on_calling_thread_only
from grammar_guard.core.compilers import Compiler, CompileResult, InThreadCompiler, planner
from grammar_guard.core.disk_store import DiskStore
from grammar_guard.core.metrics import CacheMetrics, Counter, LabelledCounter
from grammar_guard.core.priority import lower_current_thread
from grammar_guard.core.quick_budget import QuickCompileBudget
from grammar_guard.core.upgrades import MaskCost, Upgrades

if TYPE_CHECKING:
    from grammar_guard.core.engine import CompiledGrammar, GrammarEngine, TokenMatcher
    from grammar_guard.core.settings import Settings
    from grammar_guard.core.spec import GrammarSpec


# Quick compiles take milliseconds each; two at a time keep a burst of new
# keys moving without taking every core from the decoding loop.
QUICK_LANE_THREADS = 2
# Quick compiles demoted for overrunning their CPU budget that may run on at
# once (each on a spare thread of the lane), see quick_budget.py.
MAX_DEMOTED_QUICK_COMPILES = 2
# Larger specs go to the isolated lane whatever the engine predicts: judging
# one means parsing it, which must not happen on the thread admitting requests.
QUICK_LANE_MAX_CHARS = 16 * 1024


@dataclasses.dataclass(frozen=True)
class _TimedResult(CompileResult):
    """A compile's result and its wall time, which the cache folder weighs a load against."""

    seconds: float = 0.0


class _Tracked:
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


class _Lane(Executor):
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
        tracked: _Tracked,
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


class _CompilePool:
    """The compile threads, in lanes, so that a quick compile never queues behind a slow one.

    - The quick lane runs compiles that take milliseconds (the engine says
      which, before compiling) at the engine's own priority: a new key's
      first request is served within about its compile time even while
      every core is busy decoding, where a thread at nice +19 would get a
      seventieth of a core. Two compile at a time; the lane's spare
      threads carry compiles demoted for overrunning their CPU budget
      (:mod:`grammar_guard.core.quick_budget`).
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
        self.tracked = _Tracked()
        self._deferred = threading.local()
        self.quick = _Lane(
            "grammar-guard-quick-compile",
            QUICK_LANE_THREADS + MAX_DEMOTED_QUICK_COMPILES,
            follow_ups,
            self.tracked,
            self._deferred,
        )
        self.isolated = _Lane(
            "grammar-guard-compile",
            settings.compile_workers,
            follow_ups,
            self.tracked,
            self._deferred,
            **_thread_priority(settings, lowered=lowered),
        )
        # Upgrades (see upgrades.py) one at a time, apart from the requests' compiles.
        self.upgrades_tracked = _Tracked()
        self.upgrade = _Lane(
            "grammar-guard-upgrade",
            1,
            follow_ups,
            self.upgrades_tracked,
            self._deferred,
            **_thread_priority(settings, lowered=lowered),
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


def _thread_priority(settings: Settings, *, lowered: bool) -> dict[str, Any]:
    """Pool arguments that start each thread at ``GRAMMAR_GUARD_COMPILE_NICENESS`` if ``lowered``.

    Lowered only with in-thread isolation, where the lanes' threads compile
    and the disk writer serialises what they compiled: seconds of CPU the
    engine's own threads must win from them. A lowered thread of the
    engine's process is a hazard wherever it runs Python: holding the GIL
    when the scheduler passes it over, it keeps the engine's loop waiting
    until it runs again (with both cores of a 2-core machine busy, a niced
    thread running Python held the main thread off for 270 ms at a time).
    With compiles in worker processes, these threads only hand specs over,
    load what the workers send and write the disk cache, and the costly part
    of that (xgrammar's loading and serialising) releases the GIL: they run
    at the engine's priority.
    """
    if not lowered:
        return {}
    return {"initializer": lower_current_thread, "initargs": (settings.compile_niceness,)}


class CompileService:
    """Compiled grammars for one engine, under the cache's rules.

    ``clock`` drives the cache and its deadline watcher (tests pass their
    own). ``compiler`` runs every compile outside the quick lane (all of a
    plain engine's); it defaults to compiling in the pool's threads. Quick
    ones compile in the quick lane's own threads, under ``quick_budget``
    (tests pass their own). ``mask_cost`` times masks for an upgrade's
    trial (see ``upgrades``; tests pass their own). ``timer`` times compiles
    and loads for the cache folder, which keeps a grammar only while its load
    pays (tests pass their own).
    """

    def __init__(
        self,
        engine: GrammarEngine,
        settings: Settings,
        *,
        compiler: Compiler | None = None,
        metrics: CacheMetrics | None = None,
        clock: Clock = time.monotonic,
        mask_cost: MaskCost | None = None,
        quick_budget: QuickCompileBudget | None = None,
        timer: Clock = time.perf_counter,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.metrics = metrics or CacheMetrics()
        self._in_thread = InThreadCompiler(engine)
        self._compiler = compiler or self._in_thread
        self._timer = timer
        lowered = self._compiler.in_caller_thread
        self.store: DiskStore | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._writes = _Tracked()
        if settings.cache_dir is not None:
            self.store = DiskStore(
                settings.cache_dir,
                engine,
                max_bytes=settings.cache_dir_max_bytes,
                metrics=self.metrics,
                clock=timer,
            )
            self._writer = ThreadPoolExecutor(
                1,
                thread_name_prefix="grammar-guard-disk",
                **_thread_priority(settings, lowered=lowered),
            )
        self._pool = _CompilePool(settings, self._start_write, lowered=lowered)
        self._quick_budget = quick_budget or QuickCompileBudget(
            places=QUICK_LANE_THREADS,
            max_demoted=MAX_DEMOTED_QUICK_COMPILES,
            niceness=settings.compile_niceness,
            on_demote=functools.partial(self.metrics.count, Counter.QUICK_COMPILE_OVERRUNS),
        )
        self._quick_budget.start_watching()
        self._plan = planner(engine)
        self._watcher = DeadlineWatcher(clock)
        self.cache: GrammarCache[GrammarSpec, CompiledGrammar] = GrammarCache(
            self._load_or_compile,
            self._pool.isolated,
            settings,
            size_of=lambda compiled: compiled.memory_bytes,
            clock=clock,
            metrics=self.metrics,
            on_new_deadline=self._watcher.notify,
            executor_for=self._lane_for,
        )
        self._watcher.start(self.cache)
        self._upgrades = Upgrades(
            engine,
            plan=self._plan,
            compile_part=functools.partial(self._timed, self._compiler.compile),
            install=self._install_upgrade,
            executor=self._pool.upgrade,
            after=settings.upgrade_after,
            max_tracked_keys=settings.max_tracked_keys,
            metrics=self.metrics,
            max_spec_chars=QUICK_LANE_MAX_CHARS,
            mask_cost=mask_cost,
        )

    def admit(self, spec: GrammarSpec) -> Admission[CompiledGrammar]:
        """The request's claim on ``spec``'s grammar; its future resolves exactly once."""
        admission = self.cache.admit(spec)
        self._upgrades.note(spec, admission)
        return admission

    def new_matcher(
        self,
        spec: GrammarSpec,
        compiled: CompiledGrammar,
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,
    ) -> TokenMatcher:
        """A request's matcher over ``spec``'s grammar (the first of a key may record its path)."""
        matcher = self.engine.new_matcher(
            compiled, stop_token_ids=stop_token_ids, max_rollback_tokens=max_rollback_tokens
        )
        return self._upgrades.matcher(spec, compiled, matcher)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the compiles and disk writes started so far; False if ``timeout`` passed."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        # In this order: compiles start upgrades, and both start writes.
        stages = (self._pool.tracked, self._pool.upgrades_tracked, self._writes)
        return all(stage.wait(remaining()) for stage in stages)

    def close(self, reason: str) -> None:
        """Fail every request still waiting with ``reason`` and stop compiling.

        Writes already queued still finish, so a grammar that compiled just
        before shutdown is not lost.
        """
        self._watcher.stop()
        self._quick_budget.stop_watching()
        self.cache.close(reason)
        self._pool.shutdown()
        self._compiler.close()
        if self._writer is not None:
            self._writer.shutdown(wait=False)

    def compiles_quickly(self, spec: GrammarSpec) -> bool:
        """Whether ``spec`` goes to the quick lane: it is small and compiles in milliseconds."""
        return self._lane_for(spec) is self._pool.quick

    def _lane_for(self, spec: GrammarSpec) -> Executor:
        # Runs on the admitting thread: a large spec is not even parsed there.
        small = len(spec.text) < QUICK_LANE_MAX_CHARS
        quick = small and self._plan(spec).quick and self._quick_budget.admits(spec)
        return self._pool.quick if quick else self._pool.isolated

    def _load_or_compile(self, spec: GrammarSpec) -> CompiledGrammar:
        """The cache's compile function, run on the compile pool: the stored copy, or a compile."""
        store = self.store
        if store is not None and (loaded := store.load(spec)) is not None:
            return loaded
        plan = self._plan(spec)
        if self._pool.in_quick_lane():
            with self._quick_budget.compiling(spec), on_calling_thread_only():
                result = self._timed(self._in_thread.compile, spec, plan.part)
        else:
            result = self._timed(self._compiler.compile, spec, plan.part)
        self.metrics.count_labelled(LabelledCounter.COMPILES_BY_ENGINE, result.compiled.engine_name)
        self._store_later(spec, result)
        return result.compiled

    def _timed(
        self,
        compile: Callable[[GrammarSpec, str | None], CompileResult],
        spec: GrammarSpec,
        part: str | None,
    ) -> _TimedResult:
        started = self._timer()
        result = compile(spec, part)
        seconds = self._timer() - started
        return _TimedResult(result.compiled, result.serialized, seconds)

    def _install_upgrade(self, spec: GrammarSpec, result: CompileResult) -> bool:
        """Serve an upgrade compile to the key's later requests; store it in place of the first.

        Counted in ``grammar_guard_upgrades_total``, not among the cache's compiles.
        """
        if not self.cache.upgrade(spec, result.compiled):
            return False
        self._store_later(spec, result)
        return True

    def _store_later(self, spec: GrammarSpec, result: CompileResult) -> None:
        """Store ``result`` once the current task has returned; call from a compile task."""
        if self.store is not None:
            self._pool.defer(functools.partial(self._save, self.store, spec, result))

    @staticmethod
    def _save(store: DiskStore, spec: GrammarSpec, result: CompileResult) -> None:
        assert isinstance(result, _TimedResult)  # every compile goes through _timed
        store.save(spec, result.compiled, result.serialized, result.seconds)

    def _start_write(self, write: Callable[[], None]) -> None:
        assert self._writer is not None  # only the store defers work
        # Shut down: the engine is closing and the write is dropped.
        with contextlib.suppress(RuntimeError):
            self._writes.add(self._writer.submit(write))
