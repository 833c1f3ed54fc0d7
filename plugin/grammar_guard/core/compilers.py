"""Where a compile runs: in the calling thread, or (see ``process_compile``) elsewhere.

The compile service asks a :class:`Compiler` for a grammar and does not care
where the work happened. A compiler that already holds the serialised form
(a compile process sends it back that way) hands it over, so persisting the
grammar does not pay for serialising it a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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
