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
   (:func:`~grammar_guard.core.engines.xgrammar.cost.slow_for_xgrammar`), where llguidance
   compiles in about a millisecond, or a construct whose valid values
   xgrammar partly refuses
   (:func:`~grammar_guard.core.engines.xgrammar.cost.xgrammar_over_constrains`).
3. A grammar large enough that xgrammar compiles it for tens of seconds
   (:data:`~grammar_guard.core.engines.xgrammar.cost.SLOW_SPEC_CHARS` and more) is
   refused when llguidance's parser cannot hold it either
   (:class:`~grammar_guard.core.errors.PastEngineLimitsError`): a request
   that no engine serves within its compile timeout gets its 400 at once,
   instead of costing the engine a compile in the background.
4. A JSON schema both engines refuse, for a keyword at least one of them
   cannot enforce, is tried once more narrowed
   (:func:`~grammar_guard.core.schema.rewrite.narrowed_schema_text`): the
   engines compile that instead, for the client's cache key.

Inside the engine core, :mod:`~grammar_guard.core.engines.routed` turns the
decision into each key's compile plan.

``GRAMMAR_GUARD_ENGINE`` forces one engine for every key instead.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.base import CompilePlan
from grammar_guard.core.engines.llguidance import rewrite as llguidance_rewrite
from grammar_guard.core.engines.xgrammar import rewrite as xgrammar_rewrite
from grammar_guard.core.engines.xgrammar.cost import (
    SLOW_SPEC_CHARS,
    slow_for_xgrammar,
    xgrammar_compile_estimate_s,
    xgrammar_over_constrains,
)
from grammar_guard.core.errors import (
    InvalidGrammarError,
    PastEngineLimitsError,
    UnenforcedKeywordError,
)
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS, GrammarSpec, RequestKind
from grammar_guard.core.schema.rewrite import narrowed_schema_text, rewritten_schema_text
from grammar_guard.core.settings import EngineSelection, UnenforcedPolicy

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from grammar_guard.core.schema.findings import Finding

# The longest xgrammar compile a background upgrade may cost, by
# xgrammar_compile_estimate_s: seconds of one core at the lowest priority, and
# a grammar whose size grows with it (megabytes for strings of thousands of
# characters). Beyond this a key stays on llguidance.
UPGRADE_MAX_COMPILE_S = 10.0
# The longest schema tried narrowed: a second rewrite of a refused schema
# doubles what refusing it costs, which a hostile client can ask for at
# will; the schemas narrowing serves are a few kB.
NARROWED_MAX_CHARS = 64 * 1024
# How llguidance says it proved a schema allows nothing.
_UNSATISFIABLE = "Unsatisfiable schema"
# How xgrammar says a subschema allows nothing; the client may have written
# a ``not`` that the rewrite made ``false`` (schema/negation.py).
_XGRAMMAR_NOTHING = "Schema 'false' cannot accept any value"
# Specs whose costs are remembered: the route, the plan and the upgrade check
# of one key read them one after the other, so a few recent ones are enough
# for each to be parsed once (and a few, since a spec can be megabytes).
_REMEMBERED_COSTS = 16


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
    if selection.forced is not None:
        return _check(selection.forced, spec, unenforced)
    spec_costs = costs(spec)
    order = (
        (EngineName.LLGUIDANCE, EngineName.XGRAMMAR)
        if spec_costs.slow or spec_costs.over_constrains
        else (EngineName.XGRAMMAR, EngineName.LLGUIDANCE)
    )
    refusals: dict[EngineName, InvalidGrammarError] = {}
    for engine in order:
        try:
            # Strict first: an engine that drops a constraint is no candidate
            # while another enforces it.
            return _check(engine, spec, UnenforcedPolicy.REFUSE)
        except InvalidGrammarError as exc:
            too_large = len(spec_costs.compiled.text) >= SLOW_SPEC_CHARS
            if isinstance(exc, PastEngineLimitsError) and too_large:
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


@dataclass(frozen=True)
class Costs:
    """What routing reads of a spec as the engines compile it (a JSON schema rewritten).

    A format becomes its pattern there, and the pattern of ``date-time`` is
    60 kB of regex that xgrammar compiles for seconds (schema/rewrite.py).
    """

    compiled: GrammarSpec
    # xgrammar's compile of it is slow (slow_for_xgrammar).
    slow: bool
    # xgrammar refuses some of its valid values (xgrammar_over_constrains).
    over_constrains: bool


@functools.lru_cache(maxsize=_REMEMBERED_COSTS)
def costs(spec: GrammarSpec) -> Costs:
    """``spec``'s :class:`Costs`, read once while it is recent (a pure function of the spec)."""
    compiled = spec
    if spec.kind is RequestKind.JSON_SCHEMA:
        compiled = replace(spec, text=rewritten_schema_text(spec.text, spec.options.open_objects))
    return Costs(compiled, slow_for_xgrammar(compiled), xgrammar_over_constrains(compiled))


def compile_plan(spec: GrammarSpec, chosen: Route, selection: EngineSelection) -> CompilePlan:
    """How the engine core compiles ``spec``, routed to ``chosen``: the one "quick" rule.

    A key compiles quickly, in a thread rather than a killable worker, on
    llguidance (milliseconds whatever the spec), or on xgrammar when the spec
    is small and holds none of the bounds that make xgrammar's compile slow.
    """
    spec_costs = costs(spec)
    quick = chosen.engine is EngineName.LLGUIDANCE or (
        len(spec_costs.compiled.text) < SMALL_SPEC_CHARS and not spec_costs.slow
    )
    upgrade = upgrade_target(spec, chosen) if selection is EngineSelection.AUTO else None
    return CompilePlan(engine=chosen.engine, quick=quick, upgrade=upgrade)


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


# The policy needs each engine's check alone (no tokenizer, no engine), looked
# up when called.
_CHECK_MODULES = {
    EngineName.XGRAMMAR: xgrammar_rewrite,
    EngineName.LLGUIDANCE: llguidance_rewrite,
}


def _check(engine: EngineName, spec: GrammarSpec, unenforced: UnenforcedPolicy) -> Route:
    return Route(engine, _CHECK_MODULES[engine].check(spec, unenforced=unenforced))


def upgrade_target(spec: GrammarSpec, chosen: Route) -> EngineName | None:
    """xgrammar, if it could take ``spec`` over from llguidance enforcing the same; else None.

    ``chosen`` is the automatic route of ``spec``. Only a key routed to
    llguidance for xgrammar's compile time alone qualifies (its costs say
    ``slow``), and only if xgrammar enforces the same
    (:func:`xgrammar_enforces_the_same`).
    """
    if not costs(spec).slow or not xgrammar_enforces_the_same(spec, chosen):
        return None
    return EngineName.XGRAMMAR


def xgrammar_enforces_the_same(spec: GrammarSpec, chosen: Route) -> bool:
    """Whether xgrammar could serve ``spec``, routed to llguidance as ``chosen``, alike.

    Only if it is small (the engine loop judges reused keys, and parses no
    large spec), its xgrammar compile is affordable in the background
    (:data:`UPGRADE_MAX_COMPILE_S`), and xgrammar enforces it strictly,
    without the constructs it over-constrains, so both grammars accept the
    same values (``integration_tests/test_upgrade_language.py`` checks that
    on the shared collections).
    """
    spec_costs = costs(spec)
    if (
        chosen.engine is not EngineName.LLGUIDANCE
        or chosen.findings
        or chosen.narrowed_text is not None
        or len(spec_costs.compiled.text) >= SMALL_SPEC_CHARS
        or xgrammar_compile_estimate_s(spec_costs.compiled) > UPGRADE_MAX_COMPILE_S
        or spec_costs.over_constrains
    ):
        return False
    try:
        _check(EngineName.XGRAMMAR, spec, UnenforcedPolicy.REFUSE)
    except InvalidGrammarError:
        return False
    return True
