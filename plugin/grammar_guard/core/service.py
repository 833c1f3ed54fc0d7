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
background (:mod:`grammar_guard.core.upgrade.upgrades`).

Compile errors and timeouts are never stored: only a grammar that compiled
is, including one whose requests timed out before it landed, and only when
its load can pay for itself (the store judges, from the compile's time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable, Collection
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING

from grammar_guard.core.compile.cache import GrammarCache
from grammar_guard.core.compile.cache_entries import Admission, Clock
from grammar_guard.core.compile.deadline_watcher import DeadlineWatcher
from grammar_guard.core.compile.disk_store import DiskStore
from grammar_guard.core.compile.in_thread import Compiler, CompileResult, InThreadCompiler, planner
from grammar_guard.core.compile.lanes import (
    MAX_DEMOTED_QUICK_COMPILES,
    QUICK_LANE_THREADS,
    CompilePool,
    Tracked,
    thread_priority,
)
from grammar_guard.core.compile.quick_budget import QuickCompileBudget
from grammar_guard.core.engines.threads import on_calling_thread_only
from grammar_guard.core.metrics import CacheMetrics, Counter, LabelledCounter
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS
from grammar_guard.core.upgrade.upgrades import MaskCost, Upgrades

if TYPE_CHECKING:
    from grammar_guard.core.engine_names import EngineName
    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine, TokenMatcher
    from grammar_guard.core.request.spec import GrammarSpec
    from grammar_guard.core.settings import Settings


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
        self._writes = Tracked()
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
                **thread_priority(settings, lowered=lowered),
            )
        self._pool = CompilePool(settings, self._start_write, lowered=lowered)
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
            compile_on=functools.partial(self._timed, self._compiler.compile),
            install=self._install_upgrade,
            executor=self._pool.upgrade,
            after=settings.upgrade_after,
            max_tracked_keys=settings.max_tracked_keys,
            metrics=self.metrics,
            max_spec_chars=SMALL_SPEC_CHARS,
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
        small = len(spec.text) < SMALL_SPEC_CHARS
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
                result = self._timed(self._in_thread.compile, spec, plan.engine)
        else:
            result = self._timed(self._compiler.compile, spec, plan.engine)
        self.metrics.count_labelled(LabelledCounter.COMPILES_BY_ENGINE, result.compiled.engine_name)
        self._store_later(spec, result)
        return result.compiled

    def _timed(
        self,
        compile: Callable[[GrammarSpec, EngineName | None], CompileResult],
        spec: GrammarSpec,
        on: EngineName | None,
    ) -> CompileResult:
        started = self._timer()
        result = compile(spec, on)
        return dataclasses.replace(result, seconds=self._timer() - started)

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
        store.save(spec, result.compiled, result.serialized, result.seconds)

    def _start_write(self, write: Callable[[], None]) -> None:
        assert self._writer is not None  # only the store defers work
        # Shut down: the engine is closing and the write is dropped.
        with contextlib.suppress(RuntimeError):
            self._writes.add(self._writer.submit(write))
