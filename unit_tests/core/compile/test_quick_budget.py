"""In-process compiles are measured: one past its CPU budget is demoted and cannot hold the lane.

The budget's own rules run on a fake CPU clock; the service test burns real
CPU in a compile and lets the real watcher read the thread's real clock, so
what is measured is what an overrunning native compile would show.
``HANG_GUARD_S`` only turns a hang into a failure.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from unit_tests.conftest import COMPACT, SmallTokenizer

from grammar_guard.core.compile.lanes import MAX_DEMOTED_QUICK_COMPILES
from grammar_guard.core.compile.quick_budget import QuickCompileBudget
from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedCompiled, RoutedEngine
from grammar_guard.core.engines.threads import calling_thread_only, on_calling_thread_only
from grammar_guard.core.engines.xgrammar import engine as xgrammar_engine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.metrics import Counter
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings

HANG_GUARD_S = 60.0
NICENESS = 7


class _FakeCpu:
    """Per-thread CPU clocks the test sets."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}

    def __call__(self, ident: int) -> float:
        return self.seconds.get(ident, 0.0)


def _budget(cpu: _FakeCpu, demoted: list[tuple[int, int]], **overrides: int) -> QuickCompileBudget:
    return QuickCompileBudget(
        places=overrides.get("places", 1),
        max_demoted=overrides.get("max_demoted", 1),
        niceness=NICENESS,
        budget_s=1.0,
        cpu_time=cpu,
        demote_thread=lambda native_id, niceness: demoted.append((native_id, niceness)),
    )


class _HeldCompile:
    """A compile on its own thread that stays inside ``compiling`` until released."""

    def __init__(self, budget: QuickCompileBudget, key: str) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.ident = 0
        self.native_id = 0
        self._thread = threading.Thread(target=self._run, args=(budget, key))
        self._thread.start()
        assert self.inside.wait(HANG_GUARD_S), "the compile never got a place"

    def _run(self, budget: QuickCompileBudget, key: str) -> None:
        with budget.compiling(key):
            self.ident, self.native_id = threading.get_ident(), threading.get_native_id()
            self.inside.set()
            self.release.wait(HANG_GUARD_S)

    def spend(self, cpu: _FakeCpu, seconds: float) -> None:
        """Its thread's CPU clock reads ``seconds`` past its start from now on."""
        cpu.seconds[self.ident] = seconds

    def finish(self) -> None:
        self.release.set()
        self._thread.join(HANG_GUARD_S)


def test_a_compile_within_its_budget_is_left_alone() -> None:
    cpu, demoted = _FakeCpu(), []
    budget = _budget(cpu, demoted)
    held = _HeldCompile(budget, "cheap")
    held.spend(cpu, 0.9)
    budget.check()
    held.finish()
    assert demoted == [] and budget.admits("cheap")


def test_an_overrun_is_demoted_gives_its_place_back_and_its_key_leaves_the_lane() -> None:
    cpu, demoted = _FakeCpu(), []
    budget = _budget(cpu, demoted, places=1, max_demoted=2)
    hostile = _HeldCompile(budget, "hostile")
    hostile.spend(cpu, 1.5)
    budget.check()
    assert demoted == [(hostile.native_id, NICENESS)]
    assert not budget.admits("hostile")  # its retries go to a worker
    assert budget.admits("cheap")
    _HeldCompile(budget, "cheap").finish()  # the lane's only place is free again
    hostile.finish()
    assert not budget.admits("hostile")


def test_while_the_most_demoted_compiles_run_the_lane_takes_no_key() -> None:
    cpu, demoted = _FakeCpu(), []
    budget = _budget(cpu, demoted, places=1, max_demoted=1)
    hostile = _HeldCompile(budget, "hostile")
    hostile.spend(cpu, 2.0)
    budget.check()
    assert not budget.admits("cheap")
    hostile.finish()
    assert budget.admits("cheap")


# --- the service: real threads, the real CPU clock and priorities ----------------------------


def _regex(text: str) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.REGEX, text, COMPACT)


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class _Burning(RoutedEngine):
    """The routed small engines; a compile of a ``burn-`` regex spins on the CPU until released."""

    def __init__(self, xgrammar: XGrammarEngine, llguidance: LLGuidanceEngine) -> None:
        super().__init__(xgrammar, llguidance)
        self.release = threading.Event()
        self.priorities: dict[GrammarSpec, int] = {}

    def compile_on(self, spec: GrammarSpec, engine: EngineName) -> RoutedCompiled:
        if spec.text.startswith("burn-"):
            deadline = time.monotonic() + HANG_GUARD_S
            while not self.release.is_set() and time.monotonic() < deadline:
                pass  # CPU time on this thread, as a native compile's would be
        self.priorities[spec] = _priority()
        return super().compile_on(spec, engine)


@pytest.fixture
def burning(small: SmallTokenizer, small_llguidance: LLGuidanceEngine) -> Iterator[_Burning]:
    engine = _Burning(small.engine, small_llguidance)
    yield engine
    engine.release.set()


def test_overrunning_compiles_are_demoted_and_a_cheap_first_request_keeps_the_lane(
    burning: _Burning,
) -> None:
    service = CompileService(
        burning,
        Settings(compile_workers=1, compile_niceness=NICENESS),
        quick_budget=QuickCompileBudget(
            places=2, max_demoted=MAX_DEMOTED_QUICK_COMPILES, niceness=NICENESS, budget_s=0.05
        ),
    )
    try:
        hostile = [_regex(f"burn-{index}") for index in range(MAX_DEMOTED_QUICK_COMPILES)]
        assert all(service.compiles_quickly(spec) for spec in hostile)
        held = [service.admit(spec) for spec in hostile]
        deadline = time.monotonic() + HANG_GUARD_S
        while any(service.compiles_quickly(spec) for spec in hostile):
            assert time.monotonic() < deadline, "the overrunning compiles were never demoted"
            time.sleep(0.01)
        # Both demoted: the lane takes no new key until one ends...
        assert not service.compiles_quickly(_regex("cheap-[a-z]"))
        burning.release.set()
        for admission in held:
            assert admission.future.result(timeout=HANG_GUARD_S) is not None
        engine_priority = _priority()
        demoted_priority = min(19, engine_priority + NICENESS)
        assert all(burning.priorities[spec] == demoted_priority for spec in hostile)
        # ...and then a cheap key is quick again, while the overrun keys stay out.
        assert service.compiles_quickly(_regex("cheap-[a-z]"))
        assert not any(service.compiles_quickly(spec) for spec in hostile)
    finally:
        service.close("test over")


def test_the_service_counts_each_demotion(burning: _Burning) -> None:
    service = CompileService(burning, Settings(compile_workers=1))
    try:
        budget = service._quick_budget
        spec = _regex("burn-counted")
        admission = service.admit(spec)
        deadline = time.monotonic() + HANG_GUARD_S
        while budget.admits(spec):
            assert time.monotonic() < deadline, "the overrunning compile was never demoted"
            time.sleep(0.01)
        burning.release.set()
        assert admission.future.result(timeout=HANG_GUARD_S) is not None
        name = f"grammar_guard_{Counter.QUICK_COMPILE_OVERRUNS.value}_total"
        assert service.metrics.snapshot()[name] == 1
    finally:
        service.close("test over")


def test_a_quick_lane_compile_does_all_its_work_on_the_measured_thread(
    small: SmallTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # xgrammar would otherwise start compile threads the watch cannot see.
    built: list[int] = []
    real = xgrammar_engine.xgr.GrammarCompiler

    def recording(*args: Any, max_threads: int, **kwargs: Any) -> Any:
        built.append(max_threads)
        return real(*args, max_threads=max_threads, **kwargs)

    monkeypatch.setattr(xgrammar_engine.xgr, "GrammarCompiler", recording)
    with on_calling_thread_only():
        small.engine.compile(_regex("measured-[a-z]{1,8}"))
    assert built == [1]
    assert not calling_thread_only()
