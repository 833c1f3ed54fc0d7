"""Grammar compiles in worker processes, so that one which runs too long can be stopped.

xgrammar cannot cancel a compile, and a thread cannot be killed: a compile
that outlives its requests' timeout keeps a CPU busy until it ends. Here each
compile runs in a worker process that is killed once the compile passes its
hard limit; the request gets an :class:`InvalidGrammarError` saying so, and a
fresh worker takes the killed one's place. A worker that crashes (a native
fault, the kernel's OOM killer) ends its one request the same way.

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
"""

from __future__ import annotations

import mmap
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from grammar_guard.core.compilers import Compiler, CompileResult, InThreadCompiler, compile_with
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.settings import DEFAULT_COMPILE_NICENESS, CompileIsolation

if TYPE_CHECKING:
    from grammar_guard.core.engine import GrammarEngine
    from grammar_guard.core.settings import CacheSettings
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
_COMPILE = b"C"  # to the worker: a pickled (GrammarSpec, part name or None)
_READY = b"R"  # the engine is built
_START_FAILED = b"S"  # the engine could not be built: the reason
_COMPILED = b"K"  # the serialised grammar
_INVALID = b"I"  # InvalidGrammarError: its reason
_FAILED = b"F"  # any other exception: its type and text

# The worker takes the parent's import path, so it imports what the parent
# would: this package and the module of the engine's recipe.
_BOOTSTRAP = (
    "import sys; sys.path[:] = sys.argv[5:]; "
    "from grammar_guard.core.process_compile import _worker_main; "
    "_worker_main(*map(int, sys.argv[1:5]))"
)


class _WorkerLost(Exception):
    """The worker process is gone or must go; the message says what happened."""


class _Worker:
    """One compile process and the parent's end of its socket; used by one thread at a time."""

    def __init__(self, process: subprocess.Popen[bytes], connection: socket.socket) -> None:
        self.process = process
        self.connection = connection
        self.ready = False

    def stop(self) -> None:
        """Kill the process, reap it and close the socket (idempotent)."""
        self.process.kill()
        self.process.wait()
        self.connection.close()


class ProcessCompiler:
    """A :class:`Compiler` whose compiles run in ``workers`` processes, each killable.

    Thread-safe: each call to :meth:`compile` takes an idle worker for the
    length of the compile (waiting while all are busy), so as many compiles
    run at once as there are workers. One worker starts when the compiler is
    built, because starting one takes seconds; the others start only when a
    compile finds every started one busy. A start costs about five seconds
    of CPU (xgrammar imports torch; the tokenizer is rebuilt): four workers
    starting at once held a 2-core engine's steps at twice their length for
    its first 20 to 45 seconds, niced or not, and most engines never run
    more than one or two compiles at a time.
    """

    in_caller_thread = False

    def __init__(
        self,
        engine: GrammarEngine,
        *,
        workers: int,
        kill_after_s: float,
        niceness: int = DEFAULT_COMPILE_NICENESS,
    ) -> None:
        if workers < 1:
            raise ValueError("a process compiler needs at least one worker")
        self._engine = engine
        self._kill_after_s = kill_after_s
        self._niceness = niceness
        # Unnamed, so it vanishes with the last process holding it, whatever
        # way this process ends; open for as long as workers may start.
        # Workers map it rather than read it: they share its file position.
        self._recipe = tempfile.TemporaryFile()  # noqa: SIM115
        self._recipe.write(pickle.dumps(engine.recipe(), protocol=pickle.HIGHEST_PROTOCOL))
        self._recipe.flush()
        self._changed = threading.Condition()
        self._closed = False
        self._live: set[_Worker] = set()
        self._idle: list[_Worker] = []
        # Slots with no worker: not needed yet, or one that could not be
        # started. A compile that finds no idle worker starts one in a slot.
        self._empty = workers - 1
        try:
            with self._changed:
                self._idle.append(self._start_worker())
        except BaseException:
            self.close()
            raise

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        worker = self._take()
        if worker is None:
            worker = self._fill_empty_slot()
        try:
            tag, payload = self._exchange(worker, spec, part)
        except _WorkerLost as lost:
            self._replace(worker)
            raise self._lost_error(worker, lost) from None
        except BaseException:
            # The socket may hold half a message now; only a fresh worker is safe.
            self._replace(worker)
            raise
        self._give_back(worker)
        if tag == _COMPILED:
            return CompileResult(self._engine.deserialize(payload), payload)
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

    def _take(self) -> _Worker | None:
        """An idle worker, else None for an empty slot the caller fills; waits while neither."""
        with self._changed:
            while not self._idle and not self._empty and not self._closed:
                self._changed.wait()
            if self._closed:
                raise RuntimeError("the grammar compiler is closed")
            if self._idle:
                return self._idle.pop()
            self._empty -= 1
            return None

    def _give_back(self, worker: _Worker) -> None:
        with self._changed:
            if self._closed:
                worker.connection.close()  # close() already killed and reaped it
                return
            self._idle.append(worker)
            self._changed.notify()

    def _fill_empty_slot(self) -> _Worker:
        """Start a worker in an empty slot (not needed before, or its worker could not start)."""
        with self._changed:
            if self._closed:
                raise RuntimeError("the grammar compiler is closed")
            try:
                return self._start_worker()
            except OSError:
                self._empty += 1
                self._changed.notify()
                raise

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        with self._changed:
            self._live.discard(worker)
            if self._closed:
                return
            try:
                self._idle.append(self._start_worker())
            except OSError:
                self._empty += 1
            self._changed.notify()

    def _is_closed(self) -> bool:
        with self._changed:
            return self._closed

    def _start_worker(self) -> _Worker:
        """Start a worker process; called with the lock held, so close() cannot miss it."""
        ours, theirs = socket.socketpair()
        recipe_fd = self._recipe.fileno()
        arguments = [theirs.fileno(), recipe_fd, os.getpid(), self._niceness]
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
        return worker

    # -- one compile ---------------------------------------------------------

    def _exchange(
        self, worker: _Worker, spec: GrammarSpec, part: str | None
    ) -> tuple[bytes, bytes]:
        """Send ``spec`` to the worker (once it is ready) and return its answer."""
        if not worker.ready:
            tag, payload = self._receive(worker, time.monotonic() + _START_LIMIT_S, starting=True)
            if tag != _READY:
                raise _WorkerLost(payload.decode(errors="replace"))
            worker.ready = True
        deadline = time.monotonic() + self._kill_after_s
        try:
            worker.connection.settimeout(self._kill_after_s)
            _send(worker.connection, _COMPILE, pickle.dumps((spec, part)))
        except OSError as exc:  # the worker died while idle
            raise _WorkerLost(self._death(worker)) from exc
        return self._receive(worker, deadline, starting=False)

    def _lost_error(self, worker: _Worker, lost: _WorkerLost) -> Exception:
        """What the request is told when its worker is gone."""
        if self._is_closed():
            return RuntimeError("the grammar compiler was closed")
        if not worker.ready:
            return RuntimeError(f"the grammar compile process could not start: {lost}")
        return InvalidGrammarError(str(lost))

    def _receive(self, worker: _Worker, deadline: float, *, starting: bool) -> tuple[bytes, bytes]:
        try:
            return _receive(worker.connection, deadline)
        except TimeoutError:
            if starting:
                raise _WorkerLost(f"it was not ready after {_START_LIMIT_S:g} s") from None
            raise _WorkerLost(
                f"grammar compile was stopped after its hard limit of {self._kill_after_s:g} s"
            ) from None
        except (EOFError, OSError):
            raise _WorkerLost(self._death(worker)) from None

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


def make_compiler(engine: GrammarEngine, settings: CacheSettings) -> Compiler:
    """The compiler ``GRAMMAR_GUARD_COMPILE_ISOLATION`` asks for."""
    if settings.compile_isolation is CompileIsolation.THREAD:
        return InThreadCompiler(engine)
    return ProcessCompiler(
        engine,
        workers=settings.compile_workers,
        kill_after_s=settings.kill_after_s,
        niceness=settings.compile_niceness,
    )


# -- the wire ----------------------------------------------------------------


def _send(connection: socket.socket, tag: bytes, payload: bytes) -> None:
    connection.sendall(_HEADER.pack(tag, len(payload)))
    connection.sendall(payload)


def _receive(connection: socket.socket, deadline: float | None) -> tuple[bytes, bytes]:
    """One message; ``TimeoutError`` past ``deadline``, ``EOFError`` if the peer closed."""
    tag, length = _HEADER.unpack(_receive_exactly(connection, _HEADER.size, deadline))
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


def _worker_main(socket_fd: int, recipe_fd: int, parent_pid: int, niceness: int) -> None:
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
            _, payload = _receive(connection, deadline=None)
            _send(connection, *_compile_for_parent(engine, payload))
        except (EOFError, OSError):  # the parent closed the socket or is gone
            return


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
