"""Where a compile runs: in the calling thread, or (see ``process_compile``) elsewhere.

The compile service asks a :class:`Compiler` for a grammar and does not care
where the work happened. A compiler that already holds the serialised form
(a compile process sends it back that way) hands it over, so persisting the
grammar does not pay for serialising it a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from grammar_guard.core.engines.base import CompilePlan, PlannedEngine

if TYPE_CHECKING:
    from grammar_guard.core.engine_names import EngineName
    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine
    from grammar_guard.core.request.spec import GrammarSpec


@dataclass(frozen=True)
class CompileResult:
    compiled: CompiledGrammar
    # ``GrammarEngine.serialize(compiled)``, when the compiler had it anyway.
    serialized: bytes | None = None
    # The compile's wall time, where the caller timed it: the cache folder
    # weighs a load against it.
    seconds: float = 0.0


class Compiler(Protocol):
    # Whether a compile's work runs in the thread that calls compile(), and so
    # at that thread's priority (else: in another process).
    in_caller_thread: bool

    def compile(self, spec: GrammarSpec, on: EngineName | None = None) -> CompileResult:
        """Compile ``spec`` (on engine ``on`` of an engine made of several, if given).

        Raises ``InvalidGrammarError`` if it cannot be compiled.
        """
        ...

    def close(self) -> None: ...


def compile_with(
    engine: GrammarEngine, spec: GrammarSpec, on: EngineName | None
) -> CompiledGrammar:
    """``spec`` compiled by ``engine``, or by its engine ``on`` as the key's plan decided."""
    if on is None:
        return engine.compile(spec)
    if not isinstance(engine, PlannedEngine):
        raise TypeError(f"{type(engine).__name__} has no engines of its own; cannot use {on!r}")
    return engine.compile_on(spec, on)


class InThreadCompiler:
    """Compiles in the caller's thread: no overhead, but a compile cannot be stopped."""

    in_caller_thread = True

    def __init__(self, engine: GrammarEngine) -> None:
        self._engine = engine

    def compile(self, spec: GrammarSpec, on: EngineName | None = None) -> CompileResult:
        return CompileResult(compile_with(self._engine, spec, on))

    def close(self) -> None:
        pass


_UNPLANNED = CompilePlan()


def planner(engine: GrammarEngine) -> Callable[[GrammarSpec], CompilePlan]:
    """Each key's plan by ``engine``'s own decision; the default plan if it makes none.

    The planner runs on the thread admitting a request (the engine's loop),
    at most once per key, and never raises: a spec it cannot judge gets the
    default plan (not quick, no upgrade) and fails, if it must, in its compile.
    """
    if not isinstance(engine, PlannedEngine):
        return lambda _spec: _UNPLANNED

    def plan(spec: GrammarSpec) -> CompilePlan:
        try:
            return engine.plan(spec)
        except Exception:
            return _UNPLANNED

    return plan
