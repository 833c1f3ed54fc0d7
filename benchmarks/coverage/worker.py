"""A worker process: builds every path once, then checks the schemas it is sent.

Over a pipe to ``pool.py`` it sends ``("ready",)`` or ``("failed", traceback)``, ``("phase",
path, "compile" | "match")`` (the parent times each phase and kills it past its limit),
``("result", PathResult)`` per path and ``("done",)`` per task. Its output goes to a log file.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.coverage.cases import load_case
from benchmarks.coverage.results import CaseRef, PathResult

PLUGIN_SETTINGS_PREFIX = "GRAMMAR_GUARD_"
COMPILE_PHASE = "compile"
MATCH_PHASE = "match"


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


def plugin_environment(settings: WorkerSettings) -> dict[str, str]:
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
    _log_to(settings.log_path)
    for name in [name for name in os.environ if name.startswith(PLUGIN_SETTINGS_PREFIX)]:
        del os.environ[name]
    os.environ.update(plugin_environment(settings))
    try:
        from benchmarks.coverage.checker import SchemaChecker
        from harness.model import model_tokenizer

        checker = SchemaChecker(model_tokenizer(), whitespace=settings.whitespace)
    except Exception:
        connection.send(("failed", traceback.format_exc()))
        return 1
    connection.send(("ready",))
    while True:
        try:
            task: Task | None = connection.recv()
        except EOFError:
            return 0
        if task is None:
            return 0
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


def _log_to(path: Path) -> None:
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
