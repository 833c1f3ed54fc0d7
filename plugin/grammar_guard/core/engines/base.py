"""The seam between the plugin and its grammar libraries.

Everything above these protocols (cache, compilers, hosts, bitmask
handling) is written against them. Each grammar library, xgrammar and
llguidance, sits below them in its own engine module (its binding) and its
own rewrite module (what it makes of a request's text); what both do alike
is in :mod:`~grammar_guard.core.engines.refusals` (how a refused spec is
worded) and :mod:`~grammar_guard.core.engines.fingerprint`, and
:mod:`grammar_guard.core.engines.routed` puts both behind one engine. All engines
fill the same bitmask layout: one int32 row per sequence, bit ``t % 32`` of
word ``t // 32`` set when token ``t`` is allowed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS
from grammar_guard.core.settings import UnenforcedPolicy

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.request.spec import GrammarSpec
    from grammar_guard.core.schema.findings import Finding

# How many recent small specs' parses an engine keeps: routing's check parses a
# key while planning it and the in-thread compile that follows moments later
# reuses that parse, so a few are enough (each holds the library's parse).
REMEMBERED_PARSES = 16

Parsed = TypeVar("Parsed")


def small_specs_remembered(
    parse: Callable[[GrammarSpec, UnenforcedPolicy], Parsed],
) -> Callable[[GrammarSpec, UnenforcedPolicy], Parsed]:
    """``parse``, remembered for the last few small specs; large ones parse each time.

    An engine's check parses a key while routing plans it, and the in-thread
    compile that follows uses that parse. A large spec compiles in a worker
    process, which parses it there: remembering it would only hold memory.
    A parse that raises is never remembered.
    """
    remembered = functools.lru_cache(maxsize=REMEMBERED_PARSES)(parse)

    @functools.wraps(parse)
    def parsed(spec: GrammarSpec, unenforced: UnenforcedPolicy) -> Parsed:
        if len(spec.text) < SMALL_SPEC_CHARS:
            return remembered(spec, unenforced)
        return parse(spec, unenforced)

    # What functools' caches offer, so that whoever clears them finds this one.
    parsed.cache_info = remembered.cache_info  # type: ignore[attr-defined]
    parsed.cache_clear = remembered.cache_clear  # type: ignore[attr-defined]
    return parsed


class CompiledGrammar(Protocol):
    """An immutable compiled grammar, shared by every request of one key."""

    @property
    def memory_bytes(self) -> int: ...

    @property
    def engine_name(self) -> EngineName:
        """The grammar library that compiled it: a metrics label, from a fixed set."""
        ...


class TokenMatcher(Protocol):
    """One request's position in a compiled grammar."""

    @property
    def engine_name(self) -> EngineName:
        """The engine that made it, as its grammar's ``engine_name``: batch fills group by it."""
        ...

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

        The matchers all have this matcher's ``engine_name``
        (:func:`~grammar_guard.core.masks.fill.fill_by_engine` groups them
        so). Raises on any failure, possibly after some rows were written.
        """
        ...


class MatcherWrapper:
    """Base of matchers that keep records around another one and fill exactly as it does.

    A batch fill takes ``inner`` in the wrapper's place, so the wrapped
    request is filled in the same call as the rest of its engine's rows. A
    plain class, not a protocol: the check runs for every row of every step,
    and a runtime protocol check costs about 20 microseconds.
    """

    inner: TokenMatcher


class EngineRecipe(Protocol):
    """What another process needs to build an equal engine; picklable."""

    def build(self) -> GrammarEngine: ...


@dataclass(frozen=True)
class CompilePlan:
    """How one key compiles: decided once per key, before compiling, and carried to the compile.

    A plain engine's plan is the default: it compiles every spec itself, in
    whatever process the compiler chose.
    """

    # Which engine of an engine made of several compiles the key; None: the engine decides.
    engine: EngineName | None = None
    # It compiles in milliseconds: a thread at the engine's priority is enough.
    quick: bool = False
    # A part that masks the key faster, enforcing the same language, but that
    # compiles it too slowly to serve its first request; None if there is none.
    upgrade: EngineName | None = None


@runtime_checkable
class PlannedEngine(Protocol):
    """An engine that decides, per key, where and with which of its parts the key compiles."""

    def plan(self, spec: GrammarSpec) -> CompilePlan:
        """The key's plan; never raises: a refused spec compiles quickly, to its error."""
        ...

    def compile_on(self, spec: GrammarSpec, engine: EngineName) -> CompiledGrammar:
        """Compile ``spec`` with its engine ``engine``, whatever the plan says."""
        ...


class GrammarEngine(Protocol):
    """Compiles request specs and creates per-request matchers for one tokenizer."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def fingerprint(self) -> str:
        """Names what a serialised grammar is bound to: vocabulary, library format, policy.

        Two engines with equal fingerprints can load each other's
        serialised grammars; any difference (another tokenizer, another
        library release, another unenforced policy or input rewrite) gives
        another fingerprint.
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
