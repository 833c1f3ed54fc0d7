"""CompileService: the cache's fills go through the cache folder, and never wait for it.

The small real tokenizer, real files, compiles the tests hold and release by
hand, a fake clock for deadlines and a fake timer on which each compile takes
``COMPILE_S`` and a load no time, so the folder keeps what they compile.
Nothing sleeps; ``HANG_GUARD_S`` only turns a hang (a bug) into a failure.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import wait
from pathlib import Path

import pytest
from unit_tests.conftest import COMPACT, SmallTokenizer

from grammar_guard.core.compile.disk_store import DiskStore, read_header, stored_files
from grammar_guard.core.compile.in_thread import CompileResult
from grammar_guard.core.errors import CompileTimeoutError, InvalidGrammarError
from grammar_guard.core.metrics import Counter
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings

HANG_GUARD_S = 60.0
T = 30.0
# A compile's time on the fake timer: seconds, so a load (no time) pays for its file.
COMPILE_S = 2.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class HeldCompiler:
    """Compiles with the small engine; a held key waits for its gate, a failing key raises."""

    in_caller_thread = True

    def __init__(
        self, small: SmallTokenizer, *, serialized: bool = False, seconds: float = COMPILE_S
    ) -> None:
        self._engine = small.engine
        self.timer = FakeClock()  # the service's timer: each compile takes ``seconds`` on it
        self._seconds = seconds
        # Bound now, so a test may forbid the store's serialising without forbidding this.
        self._serialize = small.engine.serialize if serialized else None
        self.compiled: list[GrammarSpec] = []
        self.gates: dict[str, threading.Event] = {}
        self.failures: dict[str, BaseException] = {}

    def hold(self, text: str) -> threading.Event:
        gate = self.gates[text] = threading.Event()
        return gate

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        assert part is None, "a plain engine has no parts"
        self.compiled.append(spec)
        gate = self.gates.get(spec.text)
        if gate is not None:
            assert gate.wait(HANG_GUARD_S), "the test never released the compile"
        if spec.text in self.failures:
            raise self.failures[spec.text]
        compiled = self._engine.compile(spec)
        self.timer.now += self._seconds
        blob = self._serialize(compiled) if self._serialize is not None else None
        return CompileResult(compiled, blob)

    def close(self) -> None:
        for gate in self.gates.values():
            gate.set()


@pytest.fixture
def services(small: SmallTokenizer, tmp_path: Path) -> Iterator[list[CompileService]]:
    """Every service a test starts is closed after it."""
    started: list[CompileService] = []
    yield started
    for service in started:
        service.close("test over")


def _start(
    services: list[CompileService],
    small: SmallTokenizer,
    folder: Path | None,
    compiler: HeldCompiler,
    *,
    workers: int = 2,
    clock: FakeClock | None = None,
) -> CompileService:
    settings = Settings(compile_timeout_s=T, compile_workers=workers, cache_dir=folder)
    service = CompileService(
        small.engine, settings, compiler=compiler, clock=clock or FakeClock(), timer=compiler.timer
    )
    services.append(service)
    return service


def _grammar(service: CompileService, spec: GrammarSpec) -> object:
    future = service.admit(spec).future
    return future.result(timeout=HANG_GUARD_S)


def _counts(service: CompileService) -> dict[Counter, int]:
    return service.metrics.snapshot().counters


SPEC_TEXT = "[a-c]{2}x"


def _spec(small: SmallTokenizer, text: str = SPEC_TEXT) -> GrammarSpec:
    return small.spec(RequestKind.REGEX, text, COMPACT)


def test_a_restart_serves_from_the_folder_without_compiling(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    spec = _spec(small)
    first = _start(services, small, tmp_path, HeldCompiler(small))
    _grammar(first, spec)
    assert first.drain(HANG_GUARD_S)
    assert _counts(first)[Counter.DISK_MISSES] == 1 and _counts(first)[Counter.DISK_WRITES] == 1

    compiler = HeldCompiler(small)
    restarted = _start(services, small, tmp_path, compiler)
    loaded = _grammar(restarted, spec)
    assert compiler.compiled == []
    assert _counts(restarted)[Counter.DISK_HITS] == 1
    matcher = small.engine.new_matcher(loaded, stop_token_ids=None, max_rollback_tokens=0)  # type: ignore[arg-type]
    assert small.accepts_all(matcher, small.ids("abx"))
    assert not matcher.accept_token(small.id("a"))


def test_the_folder_records_how_long_the_compile_took(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    service = _start(services, small, tmp_path, HeldCompiler(small))
    _grammar(service, _spec(small))
    assert service.drain(HANG_GUARD_S)
    (stored,) = stored_files(tmp_path)
    assert read_header(stored.path)["compile_s"] == COMPILE_S  # type: ignore[index]


def test_a_grammar_compiled_in_no_time_is_not_stored(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    """No load costs a tenth of nothing: a restart compiles it again."""
    service = _start(services, small, tmp_path, HeldCompiler(small, seconds=0.0))
    _grammar(service, _spec(small))
    assert service.drain(HANG_GUARD_S)
    assert stored_files(tmp_path) == []
    counts = _counts(service)
    assert (counts[Counter.DISK_MISSES], counts[Counter.DISK_WRITES]) == (1, 0)
    assert counts[Counter.DISK_ERRORS] == 0


def test_without_a_folder_nothing_touches_the_disk(
    small: SmallTokenizer, services: list[CompileService]
) -> None:
    service = _start(services, small, None, HeldCompiler(small))
    _grammar(service, _spec(small))
    assert service.store is None
    assert all(_counts(service)[c] == 0 for c in (Counter.DISK_MISSES, Counter.DISK_WRITES))


def test_the_write_waits_until_the_requests_have_their_grammar_and_blocks_no_compile(
    small: SmallTokenizer,
    tmp_path: Path,
    services: list[CompileService],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writing, finish_write = threading.Event(), threading.Event()
    original_save = DiskStore.save

    def held_save(store: DiskStore, *args: object) -> bool:
        writing.set()
        assert finish_write.wait(HANG_GUARD_S)
        return original_save(store, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(DiskStore, "save", held_save)
    # One compile thread: a write that occupied it would hold the next compile.
    service = _start(services, small, tmp_path, HeldCompiler(small), workers=1)
    first = service.admit(_spec(small))
    assert first.future.result(timeout=HANG_GUARD_S) is not None
    assert writing.wait(HANG_GUARD_S)  # the write started only now, and is stuck
    second = service.admit(_spec(small, "[0-9]{3}"))
    assert second.future.result(timeout=HANG_GUARD_S) is not None
    assert stored_files(tmp_path) == []
    finish_write.set()
    assert service.drain(HANG_GUARD_S)
    assert len(stored_files(tmp_path)) == 2


def test_a_load_runs_on_the_compile_pool_not_in_the_admitting_thread(
    small: SmallTokenizer,
    tmp_path: Path,
    services: list[CompileService],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(small)
    writer = _start(services, small, tmp_path, HeldCompiler(small))
    _grammar(writer, spec)
    assert writer.drain(HANG_GUARD_S)

    loading = threading.Event()
    original_load = DiskStore.load

    def held_load(store: DiskStore, key: GrammarSpec) -> object:
        assert loading.wait(HANG_GUARD_S)
        return original_load(store, key)

    monkeypatch.setattr(DiskStore, "load", held_load)
    reader = _start(services, small, tmp_path, HeldCompiler(small))
    admission = reader.admit(spec)
    assert not admission.future.done()  # admit returned while the load waits
    loading.set()
    assert admission.future.result(timeout=HANG_GUARD_S) is not None


def test_a_compiler_s_serialised_grammar_is_stored_without_serialising_again(
    small: SmallTokenizer,
    tmp_path: Path,
    services: list[CompileService],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = _start(services, small, tmp_path, HeldCompiler(small, serialized=True))

    def no_serialize(_compiled: object) -> bytes:
        raise AssertionError("serialised twice")

    monkeypatch.setattr(service.store._engine, "serialize", no_serialize)  # type: ignore[union-attr]
    _grammar(service, _spec(small))
    assert service.drain(HANG_GUARD_S)
    assert _counts(service)[Counter.DISK_WRITES] == 1 and _counts(service)[Counter.DISK_ERRORS] == 0


def test_invalid_grammars_are_never_stored(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    compiler = HeldCompiler(small)
    compiler.failures["crash[0-9]"] = MemoryError("simulated crash")
    service = _start(services, small, tmp_path, compiler)
    for text in ("(unclosed", "crash[0-9]"):
        with pytest.raises(InvalidGrammarError):
            _grammar(service, _spec(small, text))
    assert service.drain(HANG_GUARD_S)
    assert stored_files(tmp_path) == [] and _counts(service)[Counter.DISK_WRITES] == 0


def test_a_timeout_is_never_stored_but_the_grammar_that_lands_after_it_is(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    clock = FakeClock()
    compiler = HeldCompiler(small)
    landing, failing = compiler.hold("late[0-9]"), compiler.hold("killed[0-9]")
    compiler.failures["killed[0-9]"] = InvalidGrammarError("compile killed after 120 s")
    service = _start(services, small, tmp_path, compiler, clock=clock)
    late = service.admit(_spec(small, "late[0-9]"))
    killed = service.admit(_spec(small, "killed[0-9]"))
    service.cache.expire_due(clock.now + 2 * T)
    for admission in (late, killed):
        with pytest.raises(CompileTimeoutError):
            admission.future.result(timeout=HANG_GUARD_S)
    landing.set()
    failing.set()
    assert service.drain(HANG_GUARD_S)

    restarted = _start(services, small, tmp_path, HeldCompiler(small))
    assert _grammar(restarted, _spec(small, "late[0-9]")) is not None
    assert _counts(restarted)[Counter.DISK_HITS] == 1
    assert len(stored_files(tmp_path)) == 1  # no file for the killed compile, no markers


def test_a_corrupt_file_is_recompiled_and_replaced(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    spec = _spec(small)
    writer = _start(services, small, tmp_path, HeldCompiler(small))
    _grammar(writer, spec)
    assert writer.drain(HANG_GUARD_S)
    assert writer.store is not None
    path = writer.store.path_for(spec)
    path.write_bytes(path.read_bytes()[:-7])

    compiler = HeldCompiler(small)
    repaired = _start(services, small, tmp_path, compiler)
    assert _grammar(repaired, spec) is not None
    assert repaired.drain(HANG_GUARD_S)
    assert compiler.compiled == [spec] and _counts(repaired)[Counter.DISK_ERRORS] == 1

    third = _start(services, small, tmp_path, HeldCompiler(small))
    _grammar(third, spec)
    assert _counts(third)[Counter.DISK_HITS] == 1


def test_close_fails_waiting_requests_and_stops_the_compiler(
    small: SmallTokenizer, tmp_path: Path, services: list[CompileService]
) -> None:
    compiler = HeldCompiler(small)
    compiler.hold("held[0-9]")
    service = _start(services, small, tmp_path, compiler)
    admission = service.admit(_spec(small, "held[0-9]"))
    service.close("shutting down")
    done, _ = wait([admission.future], timeout=HANG_GUARD_S)
    assert done and "shutting down" in str(admission.future.exception())
    assert all(gate.is_set() for gate in compiler.gates.values())  # close() reached it


def test_compiles_run_below_the_engine_s_priority(
    services: list[CompileService], small: SmallTokenizer, tmp_path: Path
) -> None:
    seen: dict[str, int] = {}

    class PriorityProbe(HeldCompiler):
        def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
            seen["compile"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            return super().compile(spec, part)

    engine_priority = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    service = _start(services, small, tmp_path, PriorityProbe(small))
    _grammar(service, _spec(small))
    assert service.drain(HANG_GUARD_S)
    assert seen["compile"] == min(19, engine_priority + service.settings.compile_niceness)
    # The calling thread, which stands for the engine's, keeps its priority.
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == engine_priority
