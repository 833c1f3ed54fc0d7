"""Grammar compiles in worker processes, so that one which runs too long can be stopped.

xgrammar cannot cancel a compile, and a thread cannot be killed: a compile
that outlives its requests' timeout keeps a CPU busy until it ends. Here each
compile runs in a worker process that is killed once the compile passes its
hard limit; the request gets an :class:`InvalidGrammarError` saying so, and a
fresh worker takes the killed one's place. A worker that dies on its own or
from outside (a native fault, the kernel's OOM killer, an operator's kill)
ends its requests with a :class:`CompileCrashedError`, which the cache treats
as transient: the key is tried again after a TTL, and refused for good only
once its compiles have killed their worker more than the retry budget allows.

Workers are fresh interpreters (``python -c``), not forks and not
``multiprocessing`` children: the engine process is multi-threaded, which
rules out fork, and ``multiprocessing``'s spawn re-runs the parent's main
module in the child, which under ``vllm serve`` would import vLLM there.
Each worker builds its engine once from the engine's recipe, read from an
unnamed temporary file, and then compiles one grammar at a time, sent over
a socket pair with the engine the key's plan chose, so a worker
never routes a key again (and, routed, builds llguidance's tokenizer only if
it is ever asked to compile there).
It answers with the serialised grammar, never with a pickle, so nothing a
worker sends can run code in the engine process.

A hostile grammar may also grow a compile's memory without bound. Each
worker runs under an address-space limit (``GRAMMAR_GUARD_COMPILE_WORKER_MEMORY_MB``),
so such a compile fails inside its worker, and asks the kernel's OOM killer
to pick it first, before the engine, should memory still run out. The
engine process reads back no reply longer than that limit.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from grammar_guard.core.compile.in_thread import (
    Compiler,
    CompileResult,
    InThreadCompiler,
)
from grammar_guard.core.compile.priority import run_lowered
from grammar_guard.core.compile.worker_wire import (
    COMPILE,
    COMPILED,
    INVALID,
    MAX_UNLIMITED_REPLY_BYTES,
    READY,
    OversizedMessage,
    receive,
    send,
)
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.settings import DEFAULT_COMPILE_NICENESS, CompileIsolation

if TYPE_CHECKING:
    from grammar_guard.core.engine_names import EngineName
    from grammar_guard.core.engines.base import GrammarEngine
    from grammar_guard.core.request.spec import GrammarSpec
    from grammar_guard.core.settings import Settings

# Starting a worker imports xgrammar (and with it torch): seconds, tens of
# seconds on a loaded machine. A worker not ready by then is broken.
_START_LIMIT_S = 120.0
# After a worker's socket closes, how long it may take to exit before it is killed.
_EXIT_GRACE_S = 5.0

# The worker takes the parent's import path, so it imports what the parent
# would: this package and the module of the engine's recipe.
_BOOTSTRAP = (
    "import sys; sys.path[:] = sys.argv[6:]; "
    "from grammar_guard.core.compile.worker_main import worker_main; "
    "worker_main(*map(int, sys.argv[1:6]))"
)


class _WorkerLost(Exception):
    """The worker process is gone or must go; the message says what happened."""


class _WorkerDied(_WorkerLost):
    """The worker process ended on its own or was killed from outside, not by this compiler."""


class _Worker:
    """One compile process and the parent's end of its socket; used by one thread at a time."""

    def __init__(self, process: subprocess.Popen[bytes], connection: socket.socket) -> None:
        self.process = process
        self.connection = connection

    def stop(self) -> None:
        """Kill the process, reap it and close the socket (idempotent)."""
        self.process.kill()
        self.process.wait()
        self.connection.close()


class ProcessCompiler:
    """A :class:`Compiler` whose compiles run in up to ``workers`` processes, each killable.

    Thread-safe: each call to :meth:`compile` takes an idle worker for the
    length of the compile (waiting while none is), so as many compiles run
    at once as there are workers. A start costs seconds of CPU (xgrammar
    imports torch; the tokenizer is rebuilt), and four workers starting at
    once held a small machine's engine steps at twice their length for its
    first tens of seconds, niced or not. So workers start one at a
    time, in the background: one when the compiler is built, a second as
    soon as the first is ready, so that a cheap grammar never waits behind a
    slow one, and each further one when a compile takes the last idle
    worker, so that the next compile finds one ready. A compile that finds
    none waits for whichever comes first: a worker given back or one
    started.
    """

    in_caller_thread = False

    def __init__(
        self,
        engine: GrammarEngine,
        *,
        workers: int,
        kill_after_s: float,
        niceness: int = DEFAULT_COMPILE_NICENESS,
        memory_limit_bytes: int = 0,
    ) -> None:
        """``memory_limit_bytes``: each worker's address-space limit; 0 for none."""
        if workers < 1:
            raise ValueError("a process compiler needs at least one worker")
        self._engine = engine
        self._kill_after_s = kill_after_s
        self._niceness = niceness
        self._memory_limit_bytes = memory_limit_bytes
        self._max_reply_bytes = memory_limit_bytes or MAX_UNLIMITED_REPLY_BYTES
        # Unnamed, so it vanishes with the last process holding it, whatever
        # way this process ends; open for as long as workers may start.
        # Workers map it rather than read it: they share its file position.
        self._recipe = tempfile.TemporaryFile()  # noqa: SIM115
        self._recipe.write(pickle.dumps(engine.recipe(), protocol=pickle.HIGHEST_PROTOCOL))
        self._recipe.flush()
        self._changed = threading.Condition()
        self._closed = False
        self._slots = workers
        self._live: set[_Worker] = set()  # started: starting, idle or busy
        self._idle: list[_Worker] = []  # ready and waiting for work
        self._starting = 0  # started, not ready yet
        self._reserve = min(2, workers)
        # Why the last start failed, and how many have: a compile waiting for
        # a worker fails when a start does, instead of waiting for the next.
        self._start_failure = ""
        self._start_failures = 0
        try:
            with self._changed:
                self._start_worker()
        except BaseException:
            self.close()
            raise

    def compile(self, spec: GrammarSpec, on: EngineName | None = None) -> CompileResult:
        worker = self._take()
        try:
            tag, payload = self._exchange(worker, spec, on)
        except _WorkerLost as lost:
            self._replace(worker)
            raise self._lost_error(lost) from None
        except BaseException:
            # The socket may hold half a message now; only a fresh worker is safe.
            self._replace(worker)
            raise
        self._give_back(worker)
        if tag == COMPILED:
            # Loading can cost as much as compiling (llguidance builds its
            # matcher again from the grammar): below the engine's priority too.
            loaded = run_lowered(lambda: self._engine.deserialize(payload), self._niceness)
            return CompileResult(loaded, payload)
        reason = payload.decode(errors="replace")
        if tag == INVALID:
            raise InvalidGrammarError(reason)
        raise RuntimeError(reason)

    def close(self) -> None:
        """Kill every worker and wait for each; compiles in flight end with an error."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            workers = list(self._live)
            idle = list(self._idle)
            self._idle.clear()
            self._changed.notify_all()
        for worker in workers:
            worker.process.kill()
        for worker in workers:
            worker.process.wait()
        # A busy worker's socket belongs to the thread using it, which closes it.
        for worker in idle:
            worker.connection.close()
        self._recipe.close()

    # -- the pool ------------------------------------------------------------

    def _take(self) -> _Worker:
        """An idle worker; waits while none is, starting one if a slot is empty and none starts."""
        with self._changed:
            failures_before = self._start_failures
            while True:
                if self._closed:
                    raise RuntimeError("the grammar compiler is closed")
                if self._idle:
                    worker = self._idle.pop()
                    self._start_if_short()
                    return worker
                if self._start_failures != failures_before:
                    raise RuntimeError(
                        f"the grammar compile process could not start: {self._start_failure}"
                    )
                if not self._starting and self._has_empty_slot():
                    self._start_worker()  # an OSError fails this compile at once
                self._changed.wait()

    def _give_back(self, worker: _Worker) -> None:
        with self._changed:
            if self._closed:
                worker.connection.close()  # close() already killed and reaped it
                return
            self._idle.append(worker)
            self._changed.notify()

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        with self._changed:
            self._live.discard(worker)
            self._start_if_short()
            # A compile waiting for a worker may now start one in the freed slot.
            self._changed.notify_all()

    def _start_if_short(self) -> None:
        """Start a worker if the pool is short of one (lock held); one start at a time.

        Short: fewer than two started, or none idle. A worker that cannot
        start here is retried by the next compile that finds none idle.
        """
        if self._closed or self._starting or not self._has_empty_slot():
            return
        if self._idle and len(self._live) >= self._reserve:
            return
        with suppress(OSError):
            self._start_worker()

    def _has_empty_slot(self) -> bool:
        """A slot with no worker: not needed yet, or its worker could not start (lock held)."""
        return len(self._live) < self._slots

    def _is_closed(self) -> bool:
        with self._changed:
            return self._closed

    def _start_worker(self) -> None:
        """Start a worker process in an empty slot (lock held, so close() cannot miss it).

        A thread waits for it to be ready and then makes it idle.
        """
        ours, theirs = socket.socketpair()
        recipe_fd = self._recipe.fileno()
        arguments = [
            theirs.fileno(),
            recipe_fd,
            os.getpid(),
            self._niceness,
            self._memory_limit_bytes,
        ]
        path = [entry for entry in sys.path if isinstance(entry, str)]
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, *map(str, arguments), *path],
                pass_fds=(theirs.fileno(), recipe_fd),
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()  # the worker's copy is the only one left: its exit closes the socket
        worker = _Worker(process, ours)
        self._live.add(worker)
        self._starting += 1
        threading.Thread(
            target=self._wait_until_ready,
            args=(worker,),
            name="grammar-guard-worker-start",
            daemon=True,  # a start that hangs must not hold the interpreter's exit
        ).start()

    def _wait_until_ready(self, worker: _Worker) -> None:
        failure = self._start_failure_of(worker)
        with self._changed:
            self._starting -= 1
            ready = failure is None and not self._closed
            if ready:
                self._idle.append(worker)
                self._start_if_short()
            else:
                self._live.discard(worker)
                if failure is not None:
                    self._start_failure = failure
                    self._start_failures += 1
            self._changed.notify_all()
        if not ready:
            worker.stop()

    def _start_failure_of(self, worker: _Worker) -> str | None:
        """None once ``worker`` says it is ready, else why it never will be."""
        try:
            deadline = time.monotonic() + _START_LIMIT_S
            tag, payload = receive(worker.connection, deadline, self._max_reply_bytes)
        except TimeoutError:
            return f"it was not ready after {_START_LIMIT_S:g} s"
        except OversizedMessage as exc:
            return str(exc)
        except (EOFError, OSError):
            return self._death(worker)
        return None if tag == READY else payload.decode(errors="replace")

    # -- one compile ---------------------------------------------------------

    def _exchange(
        self, worker: _Worker, spec: GrammarSpec, on: EngineName | None
    ) -> tuple[bytes, bytes]:
        """Send ``spec`` to the worker and return its answer."""
        deadline = time.monotonic() + self._kill_after_s
        try:
            worker.connection.settimeout(self._kill_after_s)
            send(worker.connection, COMPILE, pickle.dumps((spec, on)))
        except OSError as exc:  # the worker died while idle
            raise _WorkerDied(self._death(worker)) from exc
        try:
            return receive(worker.connection, deadline, self._max_reply_bytes)
        except OversizedMessage as exc:
            raise _WorkerLost(str(exc)) from None
        except TimeoutError:
            raise _WorkerLost(
                f"grammar compile was stopped after its hard limit of {self._kill_after_s:g} s"
            ) from None
        except (EOFError, OSError):
            raise _WorkerDied(self._death(worker)) from None

    def _lost_error(self, lost: _WorkerLost) -> Exception:
        """What the request is told when its worker is gone.

        A worker this compiler stopped (the hard limit, an oversized reply)
        was stopped for what the grammar costs: the grammar is refused. One
        that died otherwise may have died of anything (an operator's kill, a
        memory limit, the OOM killer): a transient failure, which the cache
        retries later.
        """
        if self._is_closed():
            return RuntimeError("the grammar compiler was closed")
        if isinstance(lost, _WorkerDied):
            return CompileCrashedError(str(lost))
        return InvalidGrammarError(str(lost))

    @staticmethod
    def _death(worker: _Worker) -> str:
        """Why the worker's socket closed: how its process ended."""
        try:
            code = worker.process.wait(_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            return "the grammar compile process stopped answering"
        if code < 0:
            number = -code
            name = signal.strsignal(number) or f"signal {number}"
            return f"the grammar compile process died (signal {number}: {name})"
        return f"the grammar compile process exited (exit code {code})"


def make_compiler(engine: GrammarEngine, settings: Settings) -> Compiler:
    """The compiler ``GRAMMAR_GUARD_COMPILE_ISOLATION`` asks for."""
    if settings.compile_isolation is CompileIsolation.THREAD:
        return InThreadCompiler(engine)
    return ProcessCompiler(
        engine,
        workers=settings.compile_workers,
        kill_after_s=settings.kill_after_s,
        niceness=settings.compile_niceness,
        memory_limit_bytes=settings.compile_worker_memory_bytes,
    )
