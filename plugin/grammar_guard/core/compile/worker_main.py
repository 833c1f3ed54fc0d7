"""A compile worker process: builds its engine once, then compiles what the engine process sends.

Started by :class:`~grammar_guard.core.compile.workers.ProcessCompiler` as a
fresh interpreter; it answers with serialised grammars, never with pickles.
"""

from __future__ import annotations

import mmap
import os
import pickle
import resource
import signal
import socket
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from grammar_guard.core.compile.in_thread import compile_with
from grammar_guard.core.compile.worker_wire import (
    COMPILED,
    FAILED,
    INVALID,
    MAX_UNLIMITED_REPLY_BYTES,
    READY,
    START_FAILED,
    receive,
    send,
)
from grammar_guard.core.errors import InvalidGrammarError

if TYPE_CHECKING:
    from grammar_guard.core.engines.base import GrammarEngine

# How long an orphaned worker may go on before it notices its parent is gone.
_ORPHAN_CHECK_S = 0.5
# The highest score: the OOM killer takes a worker before any other process.
_OOM_SCORE_ADJ = b"1000"


def worker_main(
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
        send(connection, START_FAILED, f"{type(exc).__name__}: {exc}".encode())
        return
    finally:
        os.close(recipe_fd)
    send(connection, READY, b"")
    while True:
        try:
            # An order is a pickled spec: at most the input limit, far below this.
            _, payload = receive(connection, None, MAX_UNLIMITED_REPLY_BYTES)
            send(connection, *_compile_for_parent(engine, payload))
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
        spec, on = pickle.loads(order_pickle)
        return COMPILED, engine.serialize(compile_with(engine, spec, on))
    except InvalidGrammarError as exc:
        return INVALID, exc.reason.encode()
    except Exception as exc:
        return FAILED, f"{type(exc).__name__}: {exc}".encode()


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
