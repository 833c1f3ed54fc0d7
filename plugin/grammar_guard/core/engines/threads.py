"""Whether a compile may start threads of its own, or must do all its work on the calling thread.

A compile in the engine's process can be neither killed nor interrupted; what
the plugin can do is measure it (the CPU time of its thread) and lower its
priority once it overruns (:mod:`grammar_guard.core.compile.quick_budget`). Both need
the compile's work on the one thread that is measured: xgrammar otherwise
spreads a compile over threads it starts for it, whose CPU time the calling
thread's clock does not see and whose priority is fixed when they start.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_state = threading.local()


@contextlib.contextmanager
def on_calling_thread_only() -> Iterator[None]:
    """Compiles started on this thread inside the block start no threads of their own."""
    outer = calling_thread_only()
    _state.only = True
    try:
        yield
    finally:
        _state.only = outer


def calling_thread_only() -> bool:
    return bool(getattr(_state, "only", False))
