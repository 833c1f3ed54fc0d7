"""Quick compiles run at once at the engine's priority; only slow ones wait for a worker.

A fresh server's first request of a simple kind must not wait for compile
worker processes to start, nor queue behind a slow compile, nor run at the
lowest CPU priority behind a busy decoding loop. The routed small engines,
compiles the tests hold by hand; nothing sleeps (``HANG_GUARD_S`` only turns
a hang into a failure).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unit_tests.conftest import COMPACT, SmallTokenizer

from grammar_guard.core.compile.disk_store import DiskStore
from grammar_guard.core.compile.in_thread import CompileResult
from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedCompiled, RoutedEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS, GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings

HANG_GUARD_S = 60.0

PLAIN = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
# Bounded strings are slow for xgrammar and go to llguidance, which compiles them in ms.
LONG_STRING = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 200}}}
NEITHER = {"type": "array", "uniqueItems": True}  # no engine enforces uniqueItems
LARGE_ENUM = {"enum": [f"value-{number:05d}" for number in range(SMALL_SPEC_CHARS // 10)]}


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class _Recording(RoutedEngine):
    """The routed small engines; records each compile's thread priority; a held spec waits."""

    def __init__(self, xgrammar: XGrammarEngine, llguidance: LLGuidanceEngine) -> None:
        super().__init__(xgrammar, llguidance)
        self.priorities: dict[GrammarSpec, int] = {}
        self.gates: dict[GrammarSpec, threading.Event] = {}

    def compile_on(self, spec: GrammarSpec, engine: EngineName) -> RoutedCompiled:
        self.priorities[spec] = _priority()
        gate = self.gates.get(spec)
        if gate is not None:
            assert gate.wait(HANG_GUARD_S), "the test never released the compile"
        return super().compile_on(spec, engine)

    def release(self) -> None:
        for gate in self.gates.values():
            gate.set()


@pytest.fixture
def recording(small: SmallTokenizer, small_llguidance: LLGuidanceEngine) -> Iterator[_Recording]:
    engine = _Recording(small.engine, small_llguidance)
    yield engine
    engine.release()


@pytest.fixture
def service(recording: _Recording) -> Iterator[CompileService]:
    # One slow-lane thread, so one held slow compile fills that lane.
    running = CompileService(recording, Settings(compile_workers=1))
    yield running
    recording.release()
    running.close("test over")


def test_the_router_plans_which_compiles_are_quick(routed: RoutedEngine) -> None:
    assert routed.plan(_json(PLAIN)).quick  # small, xgrammar
    assert routed.plan(_json(LONG_STRING)).quick  # llguidance
    assert routed.plan(_json(NEITHER)).quick  # refused: compiles nowhere
    assert not routed.plan(_json(LARGE_ENUM)).quick  # large, for xgrammar
    slow_regex = GrammarSpec.build(RequestKind.REGEX, "[a-z]{300}", COMPACT)
    assert routed.plan(slow_regex).engine is EngineName.LLGUIDANCE
    assert routed.plan(slow_regex).quick


class _Elsewhere:
    """A compiler standing for the worker processes: records what it was asked to compile.

    And the priority of the thread that asked: in the engine's process still.
    """

    in_caller_thread = False

    def __init__(self, engine: RoutedEngine) -> None:
        self._engine = engine
        self.orders: list[tuple[GrammarSpec, EngineName | None]] = []
        self.priorities: list[int] = []

    def compile(self, spec: GrammarSpec, on: EngineName | None = None) -> CompileResult:
        self.orders.append((spec, on))
        self.priorities.append(_priority())
        assert on is not None, "the plan's engine travels with the compile"
        return CompileResult(self._engine.compile_on(spec, on))

    def close(self) -> None:
        pass


def test_quick_compiles_stay_in_the_thread_and_others_go_to_workers(
    routed: RoutedEngine,
) -> None:
    elsewhere = _Elsewhere(routed)
    service = CompileService(routed, Settings(compile_workers=1), compiler=elsewhere)
    try:
        quick = service.admit(_json(LONG_STRING)).future.result(timeout=HANG_GUARD_S)
        assert isinstance(quick, RoutedCompiled) and quick.engine is EngineName.LLGUIDANCE
        plain = service.admit(_json(PLAIN)).future.result(timeout=HANG_GUARD_S)
        assert plain.engine is EngineName.XGRAMMAR
        refused = service.admit(_json(NEITHER)).future
        assert isinstance(refused.exception(timeout=HANG_GUARD_S), UnenforcedKeywordError)
        assert elsewhere.orders == []
        service.admit(_json(LARGE_ENUM)).future.result(timeout=HANG_GUARD_S)
        assert elsewhere.orders == [(_json(LARGE_ENUM), EngineName.XGRAMMAR.value)]
    finally:
        service.close("test over")


def test_a_large_spec_goes_to_the_isolated_lane_whatever_its_engine(
    service: CompileService, routed: RoutedEngine
) -> None:
    large_string = {**LONG_STRING, "description": "x" * SMALL_SPEC_CHARS}
    assert routed.plan(_json(large_string)).quick  # llguidance: quick, in a thread
    assert not service.compiles_quickly(_json(large_string))  # but not on the engine's lane
    assert service.compiles_quickly(_json(LONG_STRING))


def test_a_quick_compile_does_not_queue_behind_a_slow_one(
    service: CompileService, recording: _Recording
) -> None:
    slow = _json(LARGE_ENUM)
    release = recording.gates[slow] = threading.Event()
    held = service.admit(slow)
    quick = service.admit(_json(PLAIN))
    # The slow lane's only thread is held; the quick key is served regardless.
    assert quick.future.result(timeout=HANG_GUARD_S) is not None
    assert not held.future.done()
    release.set()
    assert held.future.result(timeout=HANG_GUARD_S) is not None


def test_quick_compiles_run_at_the_engine_s_priority_and_slow_ones_below_it(
    service: CompileService, recording: _Recording
) -> None:
    engine_priority = _priority()
    for spec in (_json(PLAIN), _json(LONG_STRING), _json(LARGE_ENUM)):
        service.admit(spec).future.result(timeout=HANG_GUARD_S)
    assert recording.priorities[_json(PLAIN)] == engine_priority
    assert recording.priorities[_json(LONG_STRING)] == engine_priority
    lowered = min(19, engine_priority + service.settings.compile_niceness)
    assert recording.priorities[_json(LARGE_ENUM)] == lowered


def test_with_compiles_in_workers_no_thread_of_the_engine_runs_below_its_priority(
    routed: RoutedEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lowered thread of the engine's process that holds the GIL when the
    # scheduler passes it over keeps the engine's loop waiting (compile_service).
    saved_at: list[int] = []
    save = DiskStore.save

    def recording_save(store: DiskStore, *args: Any) -> None:
        saved_at.append(_priority())
        save(store, *args)

    monkeypatch.setattr(DiskStore, "save", recording_save)
    elsewhere = _Elsewhere(routed)
    settings = Settings(compile_workers=1, cache_dir=tmp_path)
    service = CompileService(routed, settings, compiler=elsewhere)
    try:
        service.admit(_json(LARGE_ENUM)).future.result(timeout=HANG_GUARD_S)
        assert service.drain(HANG_GUARD_S)
    finally:
        service.close("test over")
    assert elsewhere.priorities == [_priority()]  # the isolated lane's thread
    assert saved_at == [_priority()]  # the disk writer
