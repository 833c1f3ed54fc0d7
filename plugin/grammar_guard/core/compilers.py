"""Where a compile runs: in the calling thread, or (see ``process_compile``) elsewhere.

The compile service asks a :class:`Compiler` for a grammar and does not care
where the work happened. A compiler that already holds the serialised form
(a compile process sends it back that way) hands it over, so persisting the
grammar does not pay for serialising it a second time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from grammar_guard.core.engine import CompiledGrammar, GrammarEngine
    from grammar_guard.core.spec import GrammarSpec


@dataclass(frozen=True)
class CompileResult:
    compiled: CompiledGrammar
    # ``GrammarEngine.serialize(compiled)``, when the compiler had it anyway.
    serialized: bytes | None = None


class Compiler(Protocol):
    def compile(self, spec: GrammarSpec) -> CompileResult:
        """Compile ``spec``; raise ``InvalidGrammarError`` if it cannot be compiled."""
        ...

    def close(self) -> None: ...


class InThreadCompiler:
    """Compiles in the caller's thread: no overhead, but a compile cannot be stopped."""

    def __init__(self, engine: GrammarEngine) -> None:
        self._engine = engine

    def compile(self, spec: GrammarSpec) -> CompileResult:
        return CompileResult(self._engine.compile(spec))

    def close(self) -> None:
        pass


@runtime_checkable
class QuickCompileEngine(Protocol):
    """An engine that knows, before compiling, which specs compile in milliseconds."""

    def compiles_quickly(self, spec: GrammarSpec) -> bool: ...


def quick_compile_predicate(engine: GrammarEngine) -> Callable[[GrammarSpec], bool]:
    """Which specs compile in milliseconds, by ``engine``'s own prediction; none if it has none.

    The predicate runs on the thread admitting a request (the engine's
    loop), once per new key, and never raises: a spec it cannot judge is
    not quick.
    """
    if not isinstance(engine, QuickCompileEngine):
        return lambda _spec: False

    def is_quick(spec: GrammarSpec) -> bool:
        try:
            return engine.compiles_quickly(spec)
        except Exception:
            return False

    return is_quick


class QuickInThreadCompiler:
    """Compiles the specs its engine says are quick in the caller's thread, others elsewhere.

    A millisecond compile sent to a worker process would pay more for the
    round trip than for the compile, and would wait for a worker to start.
    """

    def __init__(self, engine: GrammarEngine, elsewhere: Compiler) -> None:
        self._in_thread = InThreadCompiler(engine)
        self._is_quick = quick_compile_predicate(engine)
        self._elsewhere = elsewhere

    def compile(self, spec: GrammarSpec) -> CompileResult:
        if self._is_quick(spec):
            return self._in_thread.compile(spec)
        return self._elsewhere.compile(spec)

    def close(self) -> None:
        self._elsewhere.close()
