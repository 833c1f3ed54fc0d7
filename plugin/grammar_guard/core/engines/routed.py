"""Both grammar engines behind the one engine interface the cache, the compilers and hosts use.

Inside the engine core the decision is a :class:`CompilePlan`, made once per
key and carried to wherever the key compiles: which engine compiles it,
whether that takes milliseconds (a thread will do) and whether xgrammar,
whose masks are the faster, could take the key over later. A key sent to
llguidance only because xgrammar compiles it slowly is such a key: once it
is reused, :mod:`grammar_guard.core.upgrade.upgrades` compiles it on xgrammar in the
background and later requests get that grammar.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.base import CompilePlan
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine, LLGuidanceRecipe
from grammar_guard.core.engines.routing import Route, compile_plan, route
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine, XGrammarRecipe
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.settings import EngineSelection, UnenforcedPolicy

if TYPE_CHECKING:
    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine, TokenMatcher
    from grammar_guard.core.request.spec import GrammarSpec
    from grammar_guard.core.schema.findings import Finding

logger = logging.getLogger(__name__)

_REMEMBERED_ROUTES = 1024


@dataclass(frozen=True)
class RoutedCompiled:
    engine: EngineName
    inner: CompiledGrammar

    @property
    def memory_bytes(self) -> int:
        return self.inner.memory_bytes

    @property
    def engine_name(self) -> EngineName:
        return self.engine


@dataclass(frozen=True)
class RoutedRecipe:
    xgrammar: XGrammarRecipe
    llguidance: LLGuidanceRecipe
    selection: EngineSelection

    def build(self) -> RoutedEngine:
        llguidance = self.llguidance.build()
        if self.selection is not EngineSelection.XGRAMMAR:
            # Built now, in a compile process's start-up, while quick compiles
            # need no worker: built on a worker's first llguidance compile, at
            # the workers' low priority beside a busy engine, it made that
            # compile miss its timeout (the bad-input corpus's largest enum).
            llguidance.load_tokenizer()
        return RoutedEngine(
            self.xgrammar.build(), llguidance, self.selection, self.xgrammar.unenforced
        )


@dataclass(frozen=True)
class _Decision:
    """Everything routing knows of one key in the engine core."""

    plan: CompilePlan
    route: Route | None  # None: refused
    refusal: InvalidGrammarError | None


class RoutedEngine:
    """Both engines behind the one :class:`GrammarEngine` interface the cache and hosts use."""

    def __init__(
        self,
        xgrammar: XGrammarEngine,
        llguidance: LLGuidanceEngine,
        selection: EngineSelection = EngineSelection.AUTO,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> None:
        if xgrammar.vocab_size != llguidance.vocab_size:
            raise ValueError(
                f"the engines disagree on the vocabulary size ({xgrammar.vocab_size} "
                f"against {llguidance.vocab_size}); their bitmasks would not line up"
            )
        self._engines: dict[EngineName, GrammarEngine] = {
            EngineName.XGRAMMAR: xgrammar,
            EngineName.LLGUIDANCE: llguidance,
        }
        self._selection = selection
        # Both engines were built with this same policy.
        self._unenforced = unenforced

    @property
    def selection(self) -> EngineSelection:
        return self._selection

    @property
    def vocab_size(self) -> int:
        return self._engines[EngineName.XGRAMMAR].vocab_size

    @functools.cached_property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for name, engine in self._engines.items():
            digest.update(f"{name.value}={engine.fingerprint}\n".encode())
        digest.update(self._selection.value.encode())
        return "routed-" + digest.hexdigest()[:32]

    def recipe(self) -> RoutedRecipe:
        xgrammar = self._engines[EngineName.XGRAMMAR].recipe()
        llguidance = self._engines[EngineName.LLGUIDANCE].recipe()
        assert isinstance(xgrammar, XGrammarRecipe)
        assert isinstance(llguidance, LLGuidanceRecipe)
        return RoutedRecipe(xgrammar, llguidance, self._selection)

    def plan(self, spec: GrammarSpec) -> CompilePlan:
        return self._decisions(spec).plan

    @functools.cached_property
    def _decisions(self) -> Callable[[GrammarSpec], _Decision]:
        # Asked by the lane choice, the compile and the upgrade check of every
        # key, and analysing a schema is not free; a decision is a pure
        # function of the spec.
        @functools.lru_cache(maxsize=_REMEMBERED_ROUTES)
        def decisions(spec: GrammarSpec) -> _Decision:
            return self._decide(spec)

        return decisions

    def _decide(self, spec: GrammarSpec) -> _Decision:
        try:
            chosen = route(spec, unenforced=self._unenforced, selection=self._selection)
        except InvalidGrammarError as exc:
            # Refused: it compiles nowhere, so quickly, to its error.
            return _Decision(CompilePlan(quick=True), None, exc)
        return _Decision(compile_plan(spec, chosen, self._selection), chosen, None)

    def check(
        self, spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    ) -> tuple[Finding, ...]:
        return route(spec, unenforced=unenforced, selection=self._selection).findings

    def compile(self, spec: GrammarSpec) -> RoutedCompiled:
        decision = self._decisions(spec)
        if decision.refusal is not None:
            raise decision.refusal
        assert decision.plan.engine is not None
        return self.compile_on(spec, decision.plan.engine)

    def compile_on(self, spec: GrammarSpec, engine: EngineName) -> RoutedCompiled:
        logger.debug("grammar-guard: %s compiles with %s", spec.describe(), engine.value)
        return RoutedCompiled(engine, self._engines[engine].compile(self._served(spec)))

    def _served(self, spec: GrammarSpec) -> GrammarSpec:
        """What the engines compile for ``spec``: the client's, or the narrowed schema."""
        chosen = self._decisions(spec).route
        if chosen is None or chosen.narrowed_text is None:
            return spec
        return replace(spec, text=chosen.narrowed_text)

    def new_matcher(
        self,
        compiled: RoutedCompiled,  # type: ignore[override]
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,
    ) -> TokenMatcher:
        return self._engines[compiled.engine].new_matcher(
            compiled.inner, stop_token_ids=stop_token_ids, max_rollback_tokens=max_rollback_tokens
        )

    def serialize(self, compiled: RoutedCompiled) -> bytes:  # type: ignore[override]
        inner = self._engines[compiled.engine].serialize(compiled.inner)
        return compiled.engine.value.encode() + b"\n" + inner

    def deserialize(self, data: bytes) -> RoutedCompiled:
        name, separator, inner = data.partition(b"\n")
        try:
            engine = EngineName(name.decode())
        except (UnicodeDecodeError, ValueError):
            raise ValueError("not a routed grammar: no engine name") from None
        if not separator:
            raise ValueError("not a routed grammar: no payload")
        return RoutedCompiled(engine, self._engines[engine].deserialize(inner))
