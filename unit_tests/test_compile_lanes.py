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
from typing import Any

import pytest
from unit_tests.conftest import COMPACT

from grammar_guard.core.compile_service import CompileService
from grammar_guard.core.compilers import CompileResult, QuickInThreadCompiler
from grammar_guard.core.errors import UnenforcedKeywordError
from grammar_guard.core.routing import QUICK_SPEC_CHARS, EngineName, RoutedCompiled, RoutedEngine
from grammar_guard.core.settings import CacheSettings
from grammar_guard.core.spec import GrammarSpec, RequestKind

HANG_GUARD_S = 60.0

PLAIN = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
# Bounded strings are slow for xgrammar and go to llguidance, which compiles them in ms.
LONG_STRING = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 200}}}
NEITHER = {"type": "array", "contains": {"type": "integer"}}  # no engine enforces contains
LARGE_ENUM = {"enum": [f"value-{number:05d}" for number in range(QUICK_SPEC_CHARS // 10)]}


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


class _Recording:
    """Compiles with ``engine``; records each spec's thread priority; a held spec waits."""

    def __init__(self, engine: RoutedEngine) -> None:
        self._engine = engine
        self.priorities: dict[GrammarSpec, int] = {}
        self.gates: dict[GrammarSpec, threading.Event] = {}

    def compile(self, spec: GrammarSpec) -> CompileResult:
        self.priorities[spec] = _priority()
        gate = self.gates.get(spec)
        if gate is not None:
            assert gate.wait(HANG_GUARD_S), "the test never released the compile"
        return CompileResult(self._engine.compile(spec))

    def close(self) -> None:
        for gate in self.gates.values():
            gate.set()


@pytest.fixture
def recording(routed: RoutedEngine) -> _Recording:
    return _Recording(routed)


@pytest.fixture
def service(routed: RoutedEngine, recording: _Recording) -> Iterator[CompileService]:
    # One slow-lane thread, so one held slow compile fills that lane.
    running = CompileService(routed, CacheSettings(compile_workers=1), compiler=recording)
    yield running
    running.close("test over")


def test_the_router_predicts_which_compiles_are_quick(routed: RoutedEngine) -> None:
    assert routed.compiles_quickly(_json(PLAIN))  # small, xgrammar
    assert routed.compiles_quickly(_json(LONG_STRING))  # llguidance
    assert routed.compiles_quickly(_json(NEITHER))  # refused: compiles nowhere
    assert not routed.compiles_quickly(_json(LARGE_ENUM))  # large, for xgrammar
    slow_regex = GrammarSpec.build(RequestKind.REGEX, "[a-z]{300}", COMPACT)
    assert routed.route(slow_regex).engine is EngineName.LLGUIDANCE
    assert routed.compiles_quickly(slow_regex)


def test_quick_compiles_stay_in_the_thread_and_others_go_to_workers(
    routed: RoutedEngine,
) -> None:
    elsewhere = _Recording(routed)
    compiler = QuickInThreadCompiler(routed, elsewhere)
    quick = compiler.compile(_json(LONG_STRING)).compiled
    assert isinstance(quick, RoutedCompiled) and quick.engine is EngineName.LLGUIDANCE
    assert compiler.compile(_json(PLAIN)).compiled.engine is EngineName.XGRAMMAR
    with pytest.raises(UnenforcedKeywordError):
        compiler.compile(_json(NEITHER))  # refused in the thread too
    assert elsewhere.priorities == {}
    compiler.compile(_json(LARGE_ENUM))
    assert list(elsewhere.priorities) == [_json(LARGE_ENUM)]


def test_a_large_spec_goes_to_the_isolated_lane_whatever_its_engine(
    service: CompileService, routed: RoutedEngine
) -> None:
    large_string = {**LONG_STRING, "description": "x" * QUICK_SPEC_CHARS}
    assert routed.compiles_quickly(_json(large_string))  # llguidance: quick, in a thread
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
