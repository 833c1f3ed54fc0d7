"""A shorter GIL switch interval while long Python work runs beside an event loop.

A thread running Python code keeps the GIL until another thread has waited
for it a whole switch interval (5 ms by default). Judging a large input in
the API server (a 200,000-character pattern scanned, a 100,000-string
choice made canonical) is seconds of Python code, and a benign request
takes the GIL hundreds of times on its way through the event loop and
vLLM's tokenizer threads: waiting a whole interval each time, it took tens of
times longer than alone during the attack test while the engine sat idle. While such
work runs, the interval is shortened, and restored when the last of it ends.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Short enough that a few hundred handoffs cost milliseconds; long enough
# that the working thread still gets most of a core.
HANDOFF_INTERVAL_S = 0.0005


class SwitchIntervalWhileRunning:
    """Counts the work running; the first in shortens the interval, the last out restores it."""

    def __init__(self, interval_s: float = HANDOFF_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._running = 0
        self._saved = 0.0
        # As read back (the interpreter rounds down to microseconds); None: left as it was.
        self._shortened: float | None = None

    @contextmanager
    def running(self) -> Iterator[None]:
        with self._lock:
            if self._running == 0:
                self._saved = sys.getswitchinterval()
                self._shortened = None
                if self._interval_s < self._saved:
                    sys.setswitchinterval(self._interval_s)
                    self._shortened = sys.getswitchinterval()
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                # Left alone if something else set it meanwhile: that setting wins.
                shortened = self._shortened
                if self._running == 0 and sys.getswitchinterval() == shortened:
                    sys.setswitchinterval(self._saved)
