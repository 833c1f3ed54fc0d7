"""Work below the engine's priority: a loaded grammar is built on a lowered thread of its own."""

from __future__ import annotations

import os
import threading

import pytest

from grammar_guard.core.compile.priority import run_lowered
from grammar_guard.core.settings import MAX_NICENESS


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_the_task_runs_lowered_and_the_caller_keeps_its_priority() -> None:
    before = _priority()
    seen = run_lowered(_priority, 5)
    assert seen == min(MAX_NICENESS, before + 5)
    assert _priority() == before


def test_the_task_s_error_reaches_the_caller() -> None:
    def fails() -> None:
        raise ValueError("bad grammar")

    with pytest.raises(ValueError, match="bad grammar"):
        run_lowered(fails, 5)


def test_no_niceness_runs_the_task_on_the_caller_s_thread() -> None:
    assert run_lowered(threading.get_ident, 0) == threading.get_ident()
