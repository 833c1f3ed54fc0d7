"""A function run in a fresh interpreter, its results read back as JSON: engines that share nothing.

``Fresh("pkg.module:function", argument, env)`` starts
``python -m harness.fresh pkg.module:function`` and sends ``argument`` (JSON)
on its stdin. A function returns its one result; a generator yields results
and receives each following order (``send``) in its ``yield``, so one
started engine serves many orders. Results travel as lines marked ``RESULT``
on stdout, where vLLM's log lines also go; anything else there is dropped,
but the last lines are kept for the error when the interpreter dies.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

RESULT = "\x1eRESULT "


class FreshError(RuntimeError):
    pass


class Fresh:
    def __init__(self, target: str, argument: Any = None, env: Mapping[str, str] = ()) -> None:
        self.target = target
        self._process = subprocess.Popen(
            [sys.executable, "-m", "harness.fresh", target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **dict(env)},
        )
        self._write(argument)

    def _write(self, message: Any) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()

    def result(self) -> Any:
        """The next result; FreshError if the interpreter ended first."""
        assert self._process.stdout is not None
        tail: collections.deque[str] = collections.deque(maxlen=40)
        for line in self._process.stdout:
            if line.startswith(RESULT):
                return json.loads(line.removeprefix(RESULT))
            tail.append(line)
        code = self._process.wait()
        raise FreshError(f"{self.target} exited {code} without a result:\n{''.join(tail)}")

    def send(self, order: Any) -> Any:
        self._write(order)
        return self.result()

    def close(self, timeout: float = 120) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def run_fresh(target: str, argument: Any = None, env: Mapping[str, str] = ()) -> Any:
    """``target(argument)`` in a fresh interpreter with ``env`` added: its one result."""
    fresh = Fresh(target, argument, env)
    try:
        return fresh.result()
    finally:
        fresh.close()


def _emit(result: Any) -> None:
    print(RESULT + json.dumps(result), flush=True)


def _serve(target: str) -> None:
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    argument = json.loads(sys.stdin.readline())
    if not inspect.isgeneratorfunction(function):
        _emit(function(argument))
        return
    generator = function(argument)
    _emit(next(generator))
    for line in sys.stdin:
        _emit(generator.send(json.loads(line)))
    generator.close()


if __name__ == "__main__":
    _serve(sys.argv[1])
