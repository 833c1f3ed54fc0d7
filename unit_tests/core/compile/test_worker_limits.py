"""Compile workers cannot take the machine's memory: a limit, and first in line for the OOM killer.

A hostile grammar may grow a compile without bound. In a worker under its
limit such a compile fails alone; should memory still run out, the kernel's
OOM killer picks a worker before the engine; and the engine process never
allocates a reply longer than a worker could have built.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from unit_tests.core.compile.test_process_compile import GOOD, NICENESS, regex, small_faulty_engine

from grammar_guard.core.compile import worker_wire
from grammar_guard.core.compile.workers import ProcessCompiler
from grammar_guard.core.settings import Settings, default_worker_memory_bytes

if TYPE_CHECKING:
    from grammar_guard.core.engines.base import CompiledGrammar, EngineRecipe, GrammarEngine
    from grammar_guard.core.request.spec import GrammarSpec

GIB = 1 << 30
# Room for the worker's interpreter, torch and the small tokenizer's engine.
LIMIT = 4 * GIB
# A grammar text this test's engine compiles by allocating past the limit.
HOG = "hog"


class HogEngine:
    """A real engine whose compile of ``HOG`` asks for more memory than the worker may have."""

    def __init__(self, inner: GrammarEngine) -> None:
        self.inner = inner

    def recipe(self) -> HogRecipe:
        return HogRecipe(self.inner.recipe())

    def compile(self, spec: GrammarSpec) -> CompiledGrammar:
        if spec.text == HOG:
            bytearray(2 * LIMIT)
        return self.inner.compile(spec)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


@dataclass(frozen=True)
class HogRecipe:
    inner: EngineRecipe

    def build(self) -> HogEngine:
        return HogEngine(self.inner.build())


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCompiler]:
    engine = HogEngine(small_faulty_engine(tmp_path_factory.mktemp("reports")))
    compiler = ProcessCompiler(
        engine, workers=1, kill_after_s=60.0, niceness=NICENESS, memory_limit_bytes=LIMIT
    )
    yield compiler
    compiler.close()


def _only_worker(compiler: ProcessCompiler) -> psutil.Process:
    (worker,) = compiler._live
    return psutil.Process(worker.process.pid)


def test_a_worker_runs_under_its_limit_and_is_the_oom_killers_first_choice(
    limited: ProcessCompiler,
) -> None:
    assert limited.compile(GOOD).compiled is not None
    worker = _only_worker(limited)
    assert worker.rlimit(psutil.RLIMIT_AS) == (LIMIT, LIMIT)
    assert Path(f"/proc/{worker.pid}/oom_score_adj").read_text().strip() == "1000"


def test_a_compile_past_the_limit_fails_alone_and_the_worker_goes_on(
    limited: ProcessCompiler,
) -> None:
    with pytest.raises(RuntimeError, match="MemoryError"):
        limited.compile(regex(HOG))
    assert limited.compile(GOOD).compiled is not None


def test_a_reply_longer_than_the_limit_is_refused_before_it_is_allocated() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        # The header alone: a reader that went on would wait for the payload.
        theirs.sendall(worker_wire.HEADER.pack(b"K", 1 << 40))
        deadline = time.monotonic() + 60.0
        with pytest.raises(worker_wire.OversizedMessage, match="over the 1048576-byte"):
            worker_wire.receive(ours, deadline, 1 << 20)


def test_the_default_limit_is_a_share_of_the_machine_and_zero_means_none() -> None:
    default = default_worker_memory_bytes()
    assert 8 * GIB <= default <= 32 * GIB + (psutil.cpu_count() or 1) * (128 << 20)
    assert Settings().compile_worker_memory_bytes == default
    environ = {"GRAMMAR_GUARD_COMPILE_WORKER_MEMORY_MB": "0"}
    assert Settings.from_env(environ).compile_worker_memory_bytes == 0
    environ = {"GRAMMAR_GUARD_COMPILE_WORKER_MEMORY_MB": "3072"}
    assert Settings.from_env(environ).compile_worker_memory_bytes == 3 * GIB
