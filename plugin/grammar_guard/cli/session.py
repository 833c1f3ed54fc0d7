"""One command's engine and compile service, configured like the engine's."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import TracebackType

from grammar_guard.core.compile.workers import make_compiler
from grammar_guard.core.engines.base import GrammarEngine
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings


def settings_with(overrides: Mapping[str, str]) -> Settings:
    """The engine's settings from the environment, with some variables set by flags.

    Going through ``from_env`` keeps its validation and its derived defaults
    (a compile's kill limit follows the timeout, for instance).
    """
    return Settings.from_env({**os.environ, **overrides})


class Session:
    """A compile service over ``engine``; closing it stops its compiles."""

    def __init__(self, engine: GrammarEngine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.service = CompileService(engine, settings, compiler=make_compiler(engine, settings))

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        unfinished = not self.service.drain(timeout=0)
        self.service.close("the command finished")
        if unfinished:
            # Compiled in threads (GRAMMAR_GUARD_COMPILE_ISOLATION=thread), a
            # compile that timed out cannot be stopped; the interpreter waits for it.
            print(
                "grammar-guard: waiting for a timed-out compile to end "
                "(threads cannot stop it; process isolation can)",
                file=sys.stderr,
            )
