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
a socket pair with the part of the engine the key's plan chose, so a worker
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

import mmap
import os
import pickle
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from grammar_guard.core.compilers import Compiler, CompileResult, InThreadCompiler, compile_with
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.priority import run_lowered
from grammar_guard.core.settings import DEFAULT_COMPILE_NICENESS, CompileIsolation

if TYPE_CHECKING:
    from grammar_guard.core.engine import GrammarEngine
    from grammar_guard.core.settings import Settings
    from grammar_guard.core.spec import GrammarSpec

# Starting a worker imports xgrammar (and with it torch): seconds, tens of
# seconds on a loaded machine. A worker not ready by then is broken.
_START_LIMIT_S = 120.0
# How long an orphaned worker may go on before it notices its parent is gone.
_ORPHAN_CHECK_S = 0.5
# After a worker's socket closes, how long it may take to exit before it is killed.
_EXIT_GRACE_S = 5.0

# One message: a tag byte and the payload's length, then the payload.
_HEADER = struct.Struct("!cQ")
# The longest message the engine process reads from a worker without a memory
# limit (a limited worker cannot build a reply longer than its limit).
_MAX_UNLIMITED_REPLY_BYTES = 16 << 30
# The highest score: the OOM killer takes a worker before any other process.
_OOM_SCORE_ADJ = b"1000"
_COMPILE = b"C"  # to the worker: a pickled (GrammarSpec, part name or None)
_READY = b"R"  # the engine is built
_START_FAILED = b"S"  # the engine could not be built: the reason
_COMPILED = b"K"  # the serialised grammar
_INVALID = b"I"  # InvalidGrammarError: its reason
_FAILED = b"F"  # any other exception: its type and text

# The worker takes the parent's import path, so it imports what the parent
# would: this package and the module of the engine's recipe.
_BOOTSTRAP = (
    "import sys; sys.path[:] = sys.argv[6:]; "
    "from grammar_guard.core.process_compile import _worker_main; "
    "_worker_main(*map(int, sys.argv[1:6]))"
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
    at once as there are workers. A start costs about three seconds of CPU
    (xgrammar imports torch; the tokenizer is rebuilt), and four workers
    starting at once held a 2-core engine's steps at twice their length for
    its first 20 to 45 seconds, niced or not. So workers start one at a
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
        self._max_reply_bytes = memory_limit_bytes or _MAX_UNLIMITED_REPLY_BYTES
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

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        worker = self._take()
        try:
            tag, payload = self._exchange(worker, spec, part)
        except _WorkerLost as lost:
            self._replace(worker)
            raise self._lost_error(lost) from None
        except BaseException:
            # The socket may hold half a message now; only a fresh worker is safe.
            self._replace(worker)
            raise
        self._give_back(worker)
        if tag == _COMPILED:
            # Loading can cost as much as compiling (llguidance builds its
            # matcher again from the grammar): below the engine's priority too.
            loaded = run_lowered(lambda: self._engine.deserialize(payload), self._niceness)
            return CompileResult(loaded, payload)
        reason = payload.decode(errors="replace")
        if tag == _INVALID:
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
            tag, payload = _receive(worker.connection, deadline, self._max_reply_bytes)
        except TimeoutError:
            return f"it was not ready after {_START_LIMIT_S:g} s"
        except _OversizedMessage as exc:
            return str(exc)
        except (EOFError, OSError):
            return self._death(worker)
        return None if tag == _READY else payload.decode(errors="replace")

    # -- one compile ---------------------------------------------------------

    def _exchange(
        self, worker: _Worker, spec: GrammarSpec, part: str | None
    ) -> tuple[bytes, bytes]:
        """Send ``spec`` to the worker and return its answer."""
        deadline = time.monotonic() + self._kill_after_s
        try:
            worker.connection.settimeout(self._kill_after_s)
            _send(worker.connection, _COMPILE, pickle.dumps((spec, part)))
        except OSError as exc:  # the worker died while idle
            raise _WorkerDied(self._death(worker)) from exc
        try:
            return _receive(worker.connection, deadline, self._max_reply_bytes)
        except _OversizedMessage as exc:
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


# -- the wire ----------------------------------------------------------------


def _send(connection: socket.socket, tag: bytes, payload: bytes) -> None:
    connection.sendall(_HEADER.pack(tag, len(payload)))
    connection.sendall(payload)


class _OversizedMessage(Exception):
    """The peer announced a message longer than the reader accepts: nothing of it was read."""


def _receive(
    connection: socket.socket, deadline: float | None, max_length: int
) -> tuple[bytes, bytes]:
    """One message; ``TimeoutError`` past ``deadline``, ``EOFError`` if the peer closed.

    The payload's buffer is allocated from the length the peer announces, so a
    length past ``max_length`` is refused before anything is allocated.
    """
    tag, length = _HEADER.unpack(_receive_exactly(connection, _HEADER.size, deadline))
    if length > max_length:
        raise _OversizedMessage(
            f"the grammar compile process announced a {length}-byte reply, "
            f"over the {max_length}-byte limit"
        )
    return tag, _receive_exactly(connection, length, deadline)


def _receive_exactly(connection: socket.socket, size: int, deadline: float | None) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            connection.settimeout(remaining)
        count = connection.recv_into(view[received:])
        if count == 0:
            raise EOFError
        received += count
    return bytes(buffer)


# -- the worker process --------------------------------------------------------


def _worker_main(
    socket_fd: int, recipe_fd: int, parent_pid: int, niceness: int, memory_limit_bytes: int
) -> None:
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(memory_limit_bytes)
    # Before the start-up too: four workers importing torch and building the
    # tokenizer at the engine's priority held both cores of a small machine
    # for ten seconds after the engine reported ready, slowing every request.
    # Quick compiles never wait for a worker, so a slow start costs only the
    # slow compiles that arrive first. Threads xgrammar starts inherit it.
    os.nice(niceness)
    _exit_when_orphaned(parent_pid)
    connection = socket.socket(fileno=socket_fd)
    try:
        with mmap.mmap(recipe_fd, 0, access=mmap.ACCESS_READ) as recipe:
            engine = pickle.loads(recipe).build()
    except Exception as exc:
        _send(connection, _START_FAILED, f"{type(exc).__name__}: {exc}".encode())
        return
    finally:
        os.close(recipe_fd)
    _send(connection, _READY, b"")
    while True:
        try:
            # An order is a pickled spec: at most the input limit, far below this.
            _, payload = _receive(connection, None, _MAX_UNLIMITED_REPLY_BYTES)
            _send(connection, *_compile_for_parent(engine, payload))
        except (EOFError, OSError):  # the parent closed the socket or is gone
            return


def _limit_memory(limit_bytes: int) -> None:
    """Cap this worker's address space, and make it the OOM killer's first choice.

    Before the engine is built: a limit too small to build it fails the
    start with its reason, where it shows, not the first compile.
    """
    if limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    # No /proc (or a sandbox that hides it): the address-space limit still holds.
    with suppress(OSError), open("/proc/self/oom_score_adj", "wb") as score:
        score.write(_OOM_SCORE_ADJ)


def _compile_for_parent(engine: GrammarEngine, order_pickle: bytes) -> tuple[bytes, bytes]:
    try:
        spec, part = pickle.loads(order_pickle)
        return _COMPILED, engine.serialize(compile_with(engine, spec, part))
    except InvalidGrammarError as exc:
        return _INVALID, exc.reason.encode()
    except Exception as exc:
        return _FAILED, f"{type(exc).__name__}: {exc}".encode()


def _exit_when_orphaned(parent_pid: int) -> None:
    """Exit once the parent is gone, even in the middle of a compile.

    An idle worker also sees its socket close, but a busy one would finish
    its compile first. xgrammar releases the GIL while it compiles, so this
    thread runs then too.
    """

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_ORPHAN_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="grammar-guard-orphan-check", daemon=True).start()
