"""One backend, two grammar engines: each cache key goes to the engine that serves it best.

The decision is made per :class:`GrammarSpec` before compiling, so it is the
same in every process and for every request of a key:

1. Only an engine that enforces every constraint of the spec is a candidate
   (xgrammar through the schema analysis, llguidance through its own strict
   compiler); with none, the spec is refused with the reason xgrammar gives,
   which names where in the schema each keyword is.
2. Among candidates, xgrammar is preferred (its typical mask is the faster),
   unless the spec holds a string length or repetition bound that makes
   xgrammar's compile slow
   (:func:`~grammar_guard.core.xgrammar_cost.slow_for_xgrammar`), where llguidance
   compiles in about a millisecond, or a construct whose valid values
   xgrammar partly refuses
   (:func:`~grammar_guard.core.xgrammar_cost.xgrammar_over_constrains`).
3. A grammar large enough that xgrammar compiles it for tens of seconds
   (:data:`~grammar_guard.core.xgrammar_cost.SLOW_SPEC_CHARS` and more) is
   refused when llguidance's parser cannot hold it either
   (:class:`~grammar_guard.core.errors.PastEngineLimitsError`): a request
   that no engine serves within its compile timeout gets its 400 at once,
   instead of costing the engine a compile in the background.
4. A JSON schema both engines refuse, for a keyword at least one of them
   cannot enforce, is tried once more narrowed
   (:func:`~grammar_guard.core.schema.rewrite.narrowed_schema_text`): the
   engines compile that instead, for the client's cache key.

Inside the engine core the decision is a :class:`CompilePlan`, made once per
key and carried to wherever the key compiles: which engine compiles it,
whether that takes milliseconds (a thread will do) and whether xgrammar,
whose masks are the faster, could take the key over later. A key sent to
llguidance only because xgrammar compiles it slowly is such a key: once it
is reused, :mod:`grammar_guard.core.upgrades` compiles it on xgrammar in the
background and later requests get that grammar.

``GRAMMAR_GUARD_ENGINE`` forces one engine for every key instead.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grammar_guard.core.engine import CompilePlan
from grammar_guard.core.errors import (
    InvalidGrammarError,
    PastEngineLimitsError,
    UnenforcedKeywordError,
)
from grammar_guard.core.llguidance_engine import LLGuidanceEngine, LLGuidanceRecipe
from grammar_guard.core.schema.rewrite import narrowed_schema_text, rewritten_schema_text
from grammar_guard.core.settings import EngineSelection, UnenforcedPolicy
from grammar_guard.core.spec import GrammarSpec, RequestKind
from grammar_guard.core.xgrammar_cost import (
    SLOW_SPEC_CHARS,
    slow_for_xgrammar,
    xgrammar_compile_estimate_s,
    xgrammar_over_constrains,
)
from grammar_guard.core.xgrammar_engine import XGrammarEngine, XGrammarRecipe

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from grammar_guard.core.engine import CompiledGrammar, GrammarEngine, TokenMatcher
    from grammar_guard.core.schema.findings import Finding

# Below this size, and without the bounds slow_for_xgrammar looks for, an
# xgrammar compile takes milliseconds (it took 20 ms for a 30 kB enum): quick
# enough to run in a thread rather than in a killable worker process.
QUICK_SPEC_CHARS = 16 * 1024
# The longest xgrammar compile a background upgrade may cost, by
# xgrammar_compile_estimate_s: seconds of one core at the lowest priority, and
# a grammar whose size grows with it (12 MiB for strings of 1000 and 2000
# characters). Beyond this a key stays on llguidance.
UPGRADE_MAX_COMPILE_S = 10.0
_REMEMBERED_ROUTES = 1024
# The longest schema tried narrowed: a second rewrite of a refused schema
# doubles what refusing it costs, which a hostile client can ask for at
# will; the schemas narrowing serves are a few kB.
NARROWED_MAX_CHARS = 64 * 1024
# How llguidance says it proved a schema allows nothing.
_UNSATISFIABLE = "Unsatisfiable schema"
# How xgrammar says a subschema allows nothing; the client may have written
# a ``not`` that the rewrite made ``false`` (schema/negation.py).
_XGRAMMAR_NOTHING = "Schema 'false' cannot accept any value"


class EngineName(enum.Enum):
    XGRAMMAR = "xgrammar"
    LLGUIDANCE = "llguidance"


@dataclass(frozen=True)
class Route:
    engine: EngineName
    # The keywords accepted unenforced (warn policy only).
    findings: tuple[Finding, ...]
    # The schema compiled instead of the client's, where only a narrowed one
    # is served (schema/rewrite.py's narrowed_schema_text); None: the client's.
    narrowed_text: str | None = None


def route(
    spec: GrammarSpec,
    *,
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    selection: EngineSelection = EngineSelection.AUTO,
) -> Route:
    """The engine that serves ``spec``; raise :class:`InvalidGrammarError` if none will.

    Needs no tokenizer: cheap enough for an API server's request path.
    """
    return _route(spec, unenforced, selection, slow=None)


def _route(
    spec: GrammarSpec, unenforced: UnenforcedPolicy, selection: EngineSelection, slow: bool | None
) -> Route:
    """:func:`route`, given the caller's :func:`slow_for_xgrammar` of ``spec`` as compiled."""
    if selection is not EngineSelection.AUTO:
        forced = EngineName(selection.value)
        return _check(forced, spec, unenforced)
    compiled = _as_compiled(spec)
    if slow is None:
        slow = slow_for_xgrammar(compiled)
    order = (
        (EngineName.LLGUIDANCE, EngineName.XGRAMMAR)
        if slow or xgrammar_over_constrains(compiled)
        else (EngineName.XGRAMMAR, EngineName.LLGUIDANCE)
    )
    refusals: dict[EngineName, InvalidGrammarError] = {}
    for engine in order:
        try:
            # Strict first: an engine that drops a constraint is no candidate
            # while another enforces it.
            return _check(engine, spec, UnenforcedPolicy.REFUSE)
        except InvalidGrammarError as exc:
            if isinstance(exc, PastEngineLimitsError) and len(compiled.text) >= SLOW_SPEC_CHARS:
                raise
            refusals[engine] = exc
    narrowed = _narrowed_route(spec, order, refusals)
    if narrowed is not None:
        return narrowed
    if unenforced is UnenforcedPolicy.WARN:
        # Neither enforces all of it: xgrammar serves what it can, as before routing.
        for engine in (EngineName.XGRAMMAR, EngineName.LLGUIDANCE):
            try:
                return _check(engine, spec, unenforced)
            except InvalidGrammarError as exc:
                refusals[engine] = exc
    raise _clearest(refusals)


def _narrowed_route(
    spec: GrammarSpec,
    order: tuple[EngineName, ...],
    refusals: dict[EngineName, InvalidGrammarError],
) -> Route | None:
    """A route for ``spec`` narrowed, where an engine refused it for keywords; else None.

    Narrowing refuses some valid values (a ``oneOf`` told apart by a
    property no branch requires gets it required), so it is tried only
    where the schema would be refused, never where an engine serves it.
    """
    if (
        spec.kind is not RequestKind.JSON_SCHEMA
        or len(spec.text) > NARROWED_MAX_CHARS
        or not any(isinstance(refusal, UnenforcedKeywordError) for refusal in refusals.values())
    ):
        return None
    text = narrowed_schema_text(spec.text)
    if text is None:
        return None
    narrowed = replace(spec, text=text)
    for engine in order:
        try:
            return replace(_check(engine, narrowed, UnenforcedPolicy.REFUSE), narrowed_text=text)
        except InvalidGrammarError:
            continue
    return None


def _as_compiled(spec: GrammarSpec) -> GrammarSpec:
    """``spec`` as the engines compile it, to read its costs from: a JSON schema rewritten.

    A format becomes its pattern there, and the pattern of ``date-time`` is
    60 kB of regex that xgrammar compiles for seconds (schema/rewrite.py).
    """
    if spec.kind is not RequestKind.JSON_SCHEMA:
        return spec
    return replace(spec, text=rewritten_schema_text(spec.text, spec.options.open_objects))


def _clearest(refusals: dict[EngineName, InvalidGrammarError]) -> InvalidGrammarError:
    """The reason that tells the client most about a request no engine serves.

    A schema that is itself wrong is said to be first: in xgrammar's words
    where it found that (they are the more specific, and clients match
    vLLM's phrases such as "minimum greater than maximum"), else in
    llguidance's when it proved the schema unsatisfiable. One xgrammar
    phrase names what the client may not have written ("Schema 'false'",
    where the rewrite made a ``not`` of everything ``false``, or an absent
    property ``false``, which xgrammar cannot build next to patterns):
    there llguidance's proof, which names the part, comes first, else the
    keywords llguidance cannot enforce. Otherwise xgrammar's refusal, which
    locates each keyword it cannot enforce.
    """
    xgrammar = refusals.get(EngineName.XGRAMMAR)
    llguidance = refusals.get(EngineName.LLGUIDANCE)
    proved_unsatisfiable = llguidance is not None and _UNSATISFIABLE in llguidance.reason
    if xgrammar is not None and not isinstance(xgrammar, UnenforcedKeywordError):
        if _XGRAMMAR_NOTHING not in xgrammar.reason:
            return xgrammar
        if isinstance(llguidance, UnenforcedKeywordError):
            return llguidance
        if not proved_unsatisfiable:
            return _explained(xgrammar)
    if proved_unsatisfiable:
        assert llguidance is not None
        return llguidance
    if xgrammar is not None:
        return xgrammar
    assert llguidance is not None
    return llguidance


def _explained(refusal: InvalidGrammarError) -> InvalidGrammarError:
    return InvalidGrammarError(
        f"{refusal.reason} (a part of the schema that a value must match is false, "
        "or a 'not' of every value)"
    )


_ENGINE_TYPES: dict[EngineName, type[XGrammarEngine] | type[LLGuidanceEngine]] = {
    EngineName.XGRAMMAR: XGrammarEngine,
    EngineName.LLGUIDANCE: LLGuidanceEngine,
}


def _check(engine: EngineName, spec: GrammarSpec, unenforced: UnenforcedPolicy) -> Route:
    return Route(engine, _ENGINE_TYPES[engine].check(spec, unenforced=unenforced))


def upgrade_target(spec: GrammarSpec, chosen: Route, *, slow: bool) -> EngineName | None:
    """xgrammar, if it could take ``spec`` over from llguidance enforcing the same; else None.

    ``chosen`` is the automatic route of ``spec`` and ``slow`` its
    :func:`slow_for_xgrammar`. Only a key routed to llguidance for xgrammar's
    compile time alone qualifies, and only if it is small (the engine loop
    judges reused keys, and parses no large spec) and that compile is
    affordable in the background (:data:`UPGRADE_MAX_COMPILE_S`): one that xgrammar
    enforces strictly, without the constructs it over-constrains, so both
    grammars accept the same values (``integration_tests/test_upgrade_language.py`` checks that
    on the shared collections).
    """
    compiled = _as_compiled(spec)
    if (
        chosen.engine is not EngineName.LLGUIDANCE
        or chosen.findings
        or chosen.narrowed_text is not None
        or not slow
        or len(compiled.text) >= QUICK_SPEC_CHARS
        or xgrammar_compile_estimate_s(compiled) > UPGRADE_MAX_COMPILE_S
        or xgrammar_over_constrains(compiled)
    ):
        return None
    try:
        _check(EngineName.XGRAMMAR, spec, UnenforcedPolicy.REFUSE)
    except InvalidGrammarError:
        return None
    return EngineName.XGRAMMAR


@dataclass(frozen=True)
class RoutedCompiled:
    engine: EngineName
    inner: CompiledGrammar

    @property
    def memory_bytes(self) -> int:
        return self.inner.memory_bytes

    @property
    def engine_name(self) -> str:
        return self.engine.value


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
            # compile miss a 2 s timeout (the bad-input corpus's 40,000-value enum).
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

    def route(self, spec: GrammarSpec) -> Route:
        decision = self._decisions(spec)
        if decision.refusal is not None:
            raise decision.refusal
        assert decision.route is not None
        return decision.route

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
        compiled = _as_compiled(spec)
        slow = slow_for_xgrammar(compiled)
        try:
            chosen = _route(spec, self._unenforced, self._selection, slow)
        except InvalidGrammarError as exc:
            # Refused: it compiles nowhere, so quickly, to its error.
            return _Decision(CompilePlan(quick=True), None, exc)
        plan = CompilePlan(
            part=chosen.engine.value,
            quick=chosen.engine is EngineName.LLGUIDANCE
            or (len(compiled.text) < QUICK_SPEC_CHARS and not slow),
            upgrade=self._upgrade(spec, chosen, slow),
        )
        return _Decision(plan, chosen, None)

    def _upgrade(self, spec: GrammarSpec, chosen: Route, slow: bool) -> str | None:
        if self._selection is not EngineSelection.AUTO:
            return None
        target = upgrade_target(spec, chosen, slow=slow)
        return None if target is None else target.value

    def check(
        self, spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    ) -> tuple[Finding, ...]:
        return route(spec, unenforced=unenforced, selection=self._selection).findings

    def compile(self, spec: GrammarSpec) -> RoutedCompiled:
        return self.compile_part(spec, self.route(spec).engine.value)

    def compile_part(self, spec: GrammarSpec, part: str) -> RoutedCompiled:
        engine = EngineName(part)
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
