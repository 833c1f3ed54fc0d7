"""Run grammar compiles at a lower CPU priority than the engine they serve.

A compile of seconds competes for cores with the engine's decoding loop;
at the engine's own priority it delays every running request's next token
(docs/head-of-line.md measures by how much). On Linux a nice value belongs
to a thread, and threads a thread starts inherit it, so lowering the
calling thread before it compiles also lowers xgrammar's own compile threads.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from grammar_guard.core.settings import MAX_NICENESS

T = TypeVar("T")


def lower_current_thread(niceness: int) -> None:
    """Add ``niceness`` to the calling thread's nice value; a no-op where that is refused.

    Never raises: a platform without per-thread priorities (or a sandbox that
    forbids it) leaves compiles at the engine's priority, which is slower for
    others, not wrong.
    """
    lower_thread(threading.get_native_id(), niceness)


def lower_thread(native_id: int, niceness: int) -> None:
    """Add ``niceness`` to the nice value of this process's thread ``native_id``, if allowed."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        current = os.getpriority(os.PRIO_PROCESS, native_id)
        os.setpriority(os.PRIO_PROCESS, native_id, min(MAX_NICENESS, current + niceness))


def run_lowered(task: Callable[[], T], niceness: int) -> T:
    """``task()``, run on a thread of its own at ``niceness`` above the caller's nice value.

    For native work that releases the GIL (loading a compiled grammar): on a
    lowered thread it takes only the CPU the engine leaves, and with the GIL
    released it cannot hold the engine's loop while the scheduler passes it
    over. A nice value only ever goes up, hence the thread of its own.
    """
    if niceness <= 0:
        return task()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        lower_current_thread(niceness)
        try:
            outcome.append(task())
        except BaseException as exc:  # handed to the caller, whatever it is
            failure.append(exc)

    thread = threading.Thread(target=run, name="grammar-guard-lowered")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
