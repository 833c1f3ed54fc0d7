"""Worker processes, each checking one schema at a time, with a hard limit per compile.

xgrammar cannot cancel a compile: a path past its timeout (``timeout``) or whose worker died
(``crash``) costs that worker, which a fresh one replaces; the schema's other paths go back to
the front of the queue. docs/coverage.md ("Timeouts, workers and the default run").
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from benchmarks.coverage.results import CRASH, PATHS, TIMEOUT, CaseRef, PathResult, SchemaResult
from benchmarks.coverage.worker import COMPILE_PHASE, Task, WorkerSettings, worker_main

# Imported once by the fork server every worker is forked from (see that module).
_PRELOAD = "benchmarks.coverage.preload"
# Workers that fail to start this many times in a row end the run: they never will.
_START_ATTEMPTS = 3
_STOP_GRACE_S = 10.0

# Called after each schema: how many are done, how many in all, the last one.
Progress = Callable[[int, int, SchemaResult], None]


class WorkerStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class Limits:
    compile_s: float  # a path's validation and compile
    match_s: float  # feeding one schema's instances
    start_s: float  # loading the tokenizer and every path's backend


class _Worker:
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
