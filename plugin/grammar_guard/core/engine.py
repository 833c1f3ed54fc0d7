"""The seam between the backend and a grammar library.

Everything above this interface (cache, hosts, bitmask handling) is written
against these protocols; each grammar library (xgrammar, llguidance) lives
entirely in its own module below it, and ``routing`` puts both behind one
engine. All engines fill the same bitmask layout: one int32
row per sequence, bit ``t % 32`` of word ``t // 32`` set when token ``t`` is
allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from grammar_guard.core.settings import UnenforcedPolicy

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.schema_analysis import Finding
    from grammar_guard.core.spec import GrammarSpec


class CompiledGrammar(Protocol):
    """An immutable compiled grammar, shared by every request of one key."""

    @property
    def memory_bytes(self) -> int: ...

    @property
    def engine_name(self) -> str:
        """The grammar library that compiled it: a metrics label, from a fixed set."""
        ...


class TokenMatcher(Protocol):
    """One request's position in a compiled grammar."""

    def accept_token(self, token_id: int) -> bool: ...

    def rollback(self, num_tokens: int) -> None: ...

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None: ...

    def is_terminated(self) -> bool: ...

    def reset(self) -> None: ...

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        """Fill ``rows[i]`` for ``matchers[i]`` in one call, on up to ``threads`` threads.

        The matchers must all come from this matcher's engine. Raises on any
        failure, possibly after some rows were written.
        """
        ...


class EngineRecipe(Protocol):
    """What another process needs to build an equal engine; picklable."""

    def build(self) -> GrammarEngine: ...


@dataclass(frozen=True)
class CompilePlan:
    """How one key compiles: decided once per key, before compiling, and carried to the compile.

    A plain engine's plan is the default: it compiles every spec itself, in
    whatever process the compiler chose.
    """

    # Which part of an engine made of parts compiles the key; None: the engine decides.
    part: str | None = None
    # It compiles in milliseconds: a thread at the engine's priority is enough.
    quick: bool = False
    # A part that masks the key faster, enforcing the same language, but that
    # compiles it too slowly to serve its first request; None if there is none.
    upgrade: str | None = None


@runtime_checkable
class PlannedEngine(Protocol):
    """An engine that decides, per key, where and with which of its parts the key compiles."""

    def plan(self, spec: GrammarSpec) -> CompilePlan:
        """The key's plan; never raises: a refused spec compiles quickly, to its error."""
        ...

    def compile_part(self, spec: GrammarSpec, part: str) -> CompiledGrammar:
        """Compile ``spec`` with part ``part``, whatever the plan says."""
        ...


class GrammarEngine(Protocol):
    """Compiles request specs and creates per-request matchers for one tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def fingerprint(self) -> str:
        """Names the tokenizer vocabulary and library format a serialised grammar is bound to.

        Two engines with equal fingerprints can load each other's
        serialised grammars; any difference (another tokenizer, another
        library release) gives another fingerprint.
        """
        ...

    def recipe(self) -> EngineRecipe: ...

    def serialize(self, compiled: CompiledGrammar) -> bytes: ...

    def deserialize(self, data: bytes) -> CompiledGrammar:
        """The grammar ``serialize`` wrote; raises ``ValueError`` for data it cannot load."""
        ...

    @staticmethod
    def check(
        spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    ) -> tuple[Finding, ...]:
        """Parse ``spec`` without a tokenizer; raise ``InvalidGrammarError`` if it is invalid.

        Cheap enough for the request path of an API server. Schema keywords
        the engine would not enforce raise ``UnenforcedKeywordError`` under
        the refuse policy and are returned under the warn policy.
        """
        ...

    def compile(self, spec: GrammarSpec) -> CompiledGrammar:
        """Compile against the tokenizer (may take seconds); raise ``InvalidGrammarError``."""
        ...

    def new_matcher(
        self,
        compiled: CompiledGrammar,
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,
    ) -> TokenMatcher: ...
