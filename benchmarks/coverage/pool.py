"""Worker processes, each checking one schema at a time, with a hard limit per compile.

xgrammar cannot cancel a compile: a path past its timeout (``timeout``) or whose worker died
(``crash``) costs that worker, which a fresh one replaces; the schema's other paths go back to
the front of the queue. docs/coverage.md ("Timeouts, workers and the default run").

A worker builds every path once, then checks the schemas it is sent. Over its pipe it sends
``("ready",)`` or ``("failed", traceback)``, ``("phase", path, "compile" | "match")`` (the
parent times each phase and kills it past its limit), ``("result", PathResult)`` per path and
``("done",)`` per task. Its output goes to a log file.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from benchmarks.coverage.results import CRASH, PATHS, TIMEOUT, PathResult, SchemaResult
from harness.schema_data.cases import CaseRef, load_case

PLUGIN_SETTINGS_PREFIX = "GRAMMAR_GUARD_"
COMPILE_PHASE = "compile"
MATCH_PHASE = "match"
# Imported once by the fork server every worker is forked from (see that module).
_PRELOAD = "benchmarks.coverage.preload"
# Workers that fail to start this many times in a row end the run: they never will.
_START_ATTEMPTS = 3
_STOP_GRACE_S = 10.0
# Plugin settings that would change what is measured: a persistent cache or a
# warm-up would serve grammars without compiling them, and each plugin path
# sets the engine it names (paths.py).
_DROPPED_SETTINGS = (
    "GRAMMAR_GUARD_CACHE_DIR",
    "GRAMMAR_GUARD_CACHE_DIR_MB",
    "GRAMMAR_GUARD_WARMUP",
    "GRAMMAR_GUARD_COMPILE_KILL_AFTER_S",
    "GRAMMAR_GUARD_ENGINE",
)

# Called after each schema: how many are done, how many in all, the last one.
Progress = Callable[[int, int, SchemaResult], None]


class WorkerStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class Limits:
    compile_s: float  # a path's validation and compile
    match_s: float  # feeding one schema's instances
    start_s: float  # loading the tokenizer and every path's backend


@dataclass(frozen=True)
class WorkerSettings:
    data_dir: Path
    whitespace: bool
    log_path: Path
    metrics_dir: Path
    # Longer than the parent's compile limit: the parent's kill is the timeout
    # that counts, never the plugin's own.
    plugin_timeout_s: float
    # The caller's GRAMMAR_GUARD_* variables. Passed explicitly: a worker is
    # forked from a server started with the environment of the first run.
    plugin_settings: dict[str, str]


@dataclass(frozen=True)
class Task:
    ref: CaseRef
    paths: tuple[str, ...]


class WorkerPool:
    def __init__(self, workers: int, settings: WorkerSettings, limits: Limits) -> None:
        self._count = workers
        self._settings = settings
        self._limits = limits
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([_PRELOAD])

    def run(self, refs: Sequence[CaseRef], progress: Progress | None = None) -> list[SchemaResult]:
        """Every path of every schema, in the order of ``refs``."""
        run = _Run(refs, self._limits, progress)
        workers = [self._start() for _ in range(min(self._count, len(refs)))]
        failed_starts = 0
        try:
            while run.pending or any(worker.task is not None for worker in workers):
                for worker in workers:
                    if worker.ready and worker.task is None and run.pending:
                        run.assign(worker)
                _wait_for_any(workers)
                for position, worker in enumerate(workers):
                    trouble = run.serve(worker)
                    if trouble is None:
                        continue
                    failed_starts = 0 if worker.ready else failed_starts + 1
                    if failed_starts >= _START_ATTEMPTS:
                        raise WorkerStartError(f"workers failed to start: {trouble}")
                    run.give_up_current(worker, trouble)
                    worker.kill()
                    workers[position] = self._start()
        finally:
            for worker in workers:
                worker.stop()
        return [run.results[ref] for ref in refs]

    def _start(self) -> _Worker:
        return _Worker(self._context, self._settings, self._limits.start_s)


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, context: Any, settings: WorkerSettings, start_s: float) -> None:
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=worker_main, args=(child, settings), name="coverage-worker", daemon=True
        )
        self.process.start()
        child.close()
        self.ready = False
        self.task: Task | None = None
        self.remaining: list[str] = []
        self.phase: tuple[str, str] | None = None
        self.deadline: float | None = time.monotonic() + start_s

    def stop(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):  # it died meanwhile
                self.connection.send(None)
            self.process.join(_STOP_GRACE_S)
        self.kill()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.connection.close()


class _Run:
    """The queue and the results of one run."""

    def __init__(self, refs: Sequence[CaseRef], limits: Limits, progress: Progress | None) -> None:
        self.results = {ref: SchemaResult(ref) for ref in refs}
        self.pending = deque(Task(ref, PATHS) for ref in refs)
        self._limits = limits
        self._progress = progress
        self._finished = 0

    def assign(self, worker: _Worker) -> None:
        task = self.pending.popleft()
        worker.task = task
        worker.remaining = list(task.paths)
        worker.connection.send(task)

    def serve(self, worker: _Worker) -> str | None:
        """Handle the worker's messages; say why it must be replaced, if it must."""
        try:
            while worker.connection.poll():
                message = worker.connection.recv()
                if message[0] == "failed":
                    return f"it could not build the paths:\n{message[1]}"
                self._handle(worker, message)
        except (EOFError, OSError):
            pass
        if not worker.process.is_alive():
            worker.process.join()
            doing = f" while in its {worker.phase[1]} phase" if worker.phase else ""
            return f"the worker exited with code {worker.process.exitcode}{doing}"
        if worker.deadline is not None and time.monotonic() >= worker.deadline:
            return TIMEOUT
        return None

    def give_up_current(self, worker: _Worker, trouble: str) -> None:
        """Charge the path the worker was on, and queue the schema's other paths first."""
        task = worker.task
        if task is None:
            return
        path = worker.phase[0] if worker.phase else worker.remaining[0]
        if trouble == TIMEOUT:
            phase = worker.phase[1] if worker.phase else COMPILE_PHASE
            detail = f"{phase} phase ran past {self._limit(phase):g} s; the worker was killed"
            self._record(worker, PathResult(path, TIMEOUT, detail))
        else:
            self._record(worker, PathResult(path, CRASH, trouble))
        if worker.remaining:
            self.pending.appendleft(Task(task.ref, tuple(worker.remaining)))
        else:
            self._finish(task.ref)
        worker.task = None

    def _handle(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            worker.ready, worker.deadline = True, None
        elif kind == "phase":
            worker.phase = (message[1], message[2])
            worker.deadline = time.monotonic() + self._limit(message[2])
        elif kind == "result":
            self._record(worker, message[1])
        elif kind == "done":
            assert worker.task is not None
            self._finish(worker.task.ref)
            worker.task = None

    def _limit(self, phase: str) -> float:
        return self._limits.compile_s if phase == COMPILE_PHASE else self._limits.match_s

    def _record(self, worker: _Worker, result: PathResult) -> None:
        assert worker.task is not None
        self.results[worker.task.ref].paths[result.path] = result
        worker.remaining.remove(result.path)
        worker.phase, worker.deadline = None, None

    def _finish(self, ref: CaseRef) -> None:
        self._finished += 1
        if self._progress is not None:
            self._progress(self._finished, len(self.results), self.results[ref])


def _wait_for_any(workers: Sequence[_Worker]) -> None:
    """Sleep until a worker says something, dies, or reaches its deadline."""
    deadlines = [worker.deadline for worker in workers if worker.deadline is not None]
    timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
    handles: list[Connection | int] = [worker.connection for worker in workers]
    handles += [worker.process.sentinel for worker in workers]
    wait(handles, timeout)


# -- in the worker process ----------------------------------------------------


def worker_main(connection: Any, settings: WorkerSettings) -> None:
    # The backends' threads are not daemons and would keep the process alive
    # after its work is done: it ends with os._exit, whatever happened.
    code = 1
    try:
        code = _serve(connection, settings)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(connection: Any, settings: WorkerSettings) -> int:
    log = os.open(settings.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for name in [name for name in os.environ if name.startswith(PLUGIN_SETTINGS_PREFIX)]:
        del os.environ[name]
    os.environ.update(_plugin_environment(settings))
    try:
        from benchmarks.coverage.checker import SchemaChecker
        from harness.model import model_tokenizer

        checker = SchemaChecker(model_tokenizer(), whitespace=settings.whitespace)
    except Exception:
        connection.send(("failed", traceback.format_exc()))
        return 1
    connection.send(("ready",))
    while (task := _next_task(connection)) is not None:
        case = load_case(settings.data_dir, task.ref)
        for path in task.paths:
            connection.send(("phase", path, COMPILE_PHASE))
            try:
                result = checker.check(
                    path, case, lambda path=path: connection.send(("phase", path, MATCH_PHASE))
                )
            except Exception as exc:  # a grammar that raised, or a fault here: record it
                traceback.print_exc()
                result = PathResult(path, f"error:{type(exc).__name__}", str(exc)[:300])
            connection.send(("result", result))
        connection.send(("done",))
    return 0


def _next_task(connection: Any) -> Task | None:
    """The next task; None when the parent says stop or is gone."""
    try:
        task: Task | None = connection.recv()
    except EOFError:
        return None
    return task


def _plugin_environment(settings: WorkerSettings) -> dict[str, str]:
    """The plugin's settings in a worker: the caller's, but for a few the harness imposes.

    Compiles run in the plugin's threads: this process is the isolation, and
    a compile's time is then the compile's, not a transfer between processes.
    """
    kept = {
        name: value
        for name, value in settings.plugin_settings.items()
        if name not in _DROPPED_SETTINGS
    }
    return kept | {
        "GRAMMAR_GUARD_COMPILE_ISOLATION": "thread",
        "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(settings.plugin_timeout_s),
        "GRAMMAR_GUARD_METRICS_DIR": str(settings.metrics_dir),
    }
