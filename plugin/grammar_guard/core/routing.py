"""One backend, two grammar engines: each cache key goes to the engine that serves it best.

The decision is made per :class:`GrammarSpec` before compiling, so it is the
same in every process and for every request of a key:

1. Only an engine that enforces every constraint of the spec is a candidate
   (xgrammar through the schema analysis, llguidance through its own strict
   compiler); with none, the spec is refused with the reason xgrammar gives,
   which names where in the schema each keyword is.
2. Among candidates, xgrammar is preferred (its typical mask is the faster),
   unless the spec holds a string length or repetition bound that makes
   xgrammar's compile slow (:func:`slow_for_xgrammar`), where llguidance
   compiles in about a millisecond, or a construct whose valid values
   xgrammar partly refuses (:func:`xgrammar_over_constrains`).

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
import json
import logging
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grammar_guard.core.engine import CompilePlan
from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.llguidance_engine import LLGuidanceEngine, LLGuidanceRecipe
from grammar_guard.core.schema_analysis import subschemas, type_set
from grammar_guard.core.settings import EngineSelection, UnenforcedPolicy
from grammar_guard.core.spec import GrammarSpec, RequestKind
from grammar_guard.core.xgrammar_engine import XGrammarEngine, XGrammarRecipe

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from grammar_guard.core.engine import CompiledGrammar, GrammarEngine, TokenMatcher
    from grammar_guard.core.schema_analysis import Finding

# xgrammar unrolls a bounded string into one rule per character and checks
# every token of the vocabulary against each. Measured on a 129k-token
# vocabulary: about 20 ms per unit of maxLength (150 ms at 8, 1.4 s at 64,
# seconds beyond), about 1.5 ms per unit of a regex repetition count, and
# nothing measurable for maxItems. llguidance builds its lexer lazily and
# compiles any of these in about a millisecond.
SLOW_STRING_LENGTH = 8
SLOW_REPEAT_COUNT = 64
# Large grammars of any shape: xgrammar took 20 ms for a 30 kB enum, 0.4 s
# for 120 kB and tens of seconds for 560 kB, llguidance 0.14 s for 560 kB.
SLOW_SPEC_CHARS = 64 * 1024
# Below this size, and without those bounds, an xgrammar compile takes
# milliseconds (it took 20 ms for a 30 kB enum): quick enough to run in a
# thread rather than in a killable worker process.
QUICK_SPEC_CHARS = 16 * 1024
_STRING_BOUNDS = ("maxLength", "minLength")
# The longest xgrammar compile a background upgrade may cost, by the figures
# above: seconds of one core at the lowest priority, and a grammar whose size
# grows with it (12 MiB for strings of 1000 and 2000 characters). Beyond
# this a key stays on llguidance.
UPGRADE_MAX_COMPILE_S = 10.0
_STRING_UNIT_S = 0.02
_REPEAT_UNIT_S = 0.0015
_REMEMBERED_ROUTES = 1024
# How llguidance says it proved a schema allows nothing.
_UNSATISFIABLE = "Unsatisfiable schema"
# {n}, {n,} and {n,m} in a regex or a pattern.
_REGEX_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
# Keywords that say nothing about a value: a schema of only these admits any.
_ANNOTATIONS = frozenset(
    {"title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated"}
)
# Keywords that give an object's or an array's members their shape.
_OBJECT_SHAPE = frozenset(
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}
    | {"propertyNames", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"}
)
_ARRAY_SHAPE = frozenset(
    {"items", "prefixItems", "contains", "$ref", "allOf", "anyOf", "oneOf", "enum", "const"}
)


class EngineName(enum.Enum):
    XGRAMMAR = "xgrammar"
    LLGUIDANCE = "llguidance"


@dataclass(frozen=True)
class Route:
    engine: EngineName
    # The keywords accepted unenforced (warn policy only).
    findings: tuple[Finding, ...]


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
    """:func:`route`, given :func:`slow_for_xgrammar` of ``spec`` if the caller has it."""
    if selection is not EngineSelection.AUTO:
        forced = EngineName(selection.value)
        return _check(forced, spec, unenforced)
    if slow is None:
        slow = slow_for_xgrammar(spec)
    order = (
        (EngineName.LLGUIDANCE, EngineName.XGRAMMAR)
        if slow or xgrammar_over_constrains(spec)
        else (EngineName.XGRAMMAR, EngineName.LLGUIDANCE)
    )
    refusals: dict[EngineName, InvalidGrammarError] = {}
    for engine in order:
        try:
            # Strict first: an engine that drops a constraint is no candidate
            # while another enforces it.
            return _check(engine, spec, UnenforcedPolicy.REFUSE)
        except InvalidGrammarError as exc:
            refusals[engine] = exc
    if unenforced is UnenforcedPolicy.WARN:
        # Neither enforces all of it: xgrammar serves what it can, as before routing.
        for engine in (EngineName.XGRAMMAR, EngineName.LLGUIDANCE):
            try:
                return _check(engine, spec, unenforced)
            except InvalidGrammarError as exc:
                refusals[engine] = exc
    raise _clearest(refusals)


def _clearest(refusals: dict[EngineName, InvalidGrammarError]) -> InvalidGrammarError:
    """The reason that tells the client most about a request no engine serves.

    A schema that is itself wrong is said to be first: in xgrammar's words
    where it found that (they are the more specific), else in llguidance's
    when it proved the schema unsatisfiable. Otherwise xgrammar's refusal,
    which locates each keyword it cannot enforce in the schema.
    """
    xgrammar = refusals.get(EngineName.XGRAMMAR)
    llguidance = refusals.get(EngineName.LLGUIDANCE)
    if xgrammar is not None and not isinstance(xgrammar, UnenforcedKeywordError):
        return xgrammar
    if llguidance is not None and _UNSATISFIABLE in llguidance.reason:
        return llguidance
    if xgrammar is not None:
        return xgrammar
    assert llguidance is not None
    return llguidance


_ENGINE_TYPES: dict[EngineName, type[XGrammarEngine] | type[LLGuidanceEngine]] = {
    EngineName.XGRAMMAR: XGrammarEngine,
    EngineName.LLGUIDANCE: LLGuidanceEngine,
}


def _check(engine: EngineName, spec: GrammarSpec, unenforced: UnenforcedPolicy) -> Route:
    return Route(engine, _ENGINE_TYPES[engine].check(spec, unenforced=unenforced))


def slow_for_xgrammar(spec: GrammarSpec) -> bool:
    """Whether ``spec`` is large, or bounds a string or a repetition: slow for xgrammar."""
    if len(spec.text) >= SLOW_SPEC_CHARS:
        return True
    if spec.kind is RequestKind.JSON_SCHEMA:
        return _schema_is_slow(json.loads(spec.text))
    if spec.kind in (RequestKind.REGEX, RequestKind.GRAMMAR):
        return _repeats_are_slow(spec.text)
    return False


def xgrammar_compile_estimate_s(spec: GrammarSpec) -> float:
    """Roughly how long xgrammar compiles ``spec`` on a large vocabulary, from its bounds."""
    if spec.kind is RequestKind.JSON_SCHEMA:
        strings, repeats = _schema_bounds(json.loads(spec.text))
    elif spec.kind in (RequestKind.REGEX, RequestKind.GRAMMAR):
        strings, repeats = 0, _repeat_total(spec.text)
    else:
        strings, repeats = 0, 0
    return strings * _STRING_UNIT_S + repeats * _REPEAT_UNIT_S


def _schema_bounds(node: Any) -> tuple[int, int]:
    """The sums of the string length bounds and of the pattern repeat counts in a schema."""
    strings = repeats = 0
    for keyword, value in _bounds_in(node):
        if keyword == "pattern":
            repeats += _repeat_total(value)
        else:
            strings += int(min(value, 1 << 31))
    return strings, repeats


def _repeat_total(text: str) -> int:
    return sum(int(m.group(2) or m.group(1)) for m in _REGEX_REPEAT.finditer(text))


def _schema_is_slow(node: Any) -> bool:
    return any(
        _repeats_are_slow(value) if keyword == "pattern" else value >= SLOW_STRING_LENGTH
        for keyword, value in _bounds_in(node)
    )


def _bounds_in(node: Any) -> Iterator[tuple[str, Any]]:
    """Every string length bound (a number) and ``pattern`` (a string) in a schema."""
    pending = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            for key, value in item.items():
                if (key in _STRING_BOUNDS and isinstance(value, int | float)) or (
                    key == "pattern" and isinstance(value, str)
                ):
                    yield key, value
                elif key not in ("enum", "const", "default", "examples"):
                    pending.append(value)


def xgrammar_over_constrains(spec: GrammarSpec) -> bool:
    """Whether xgrammar, as grammar-guard runs it, refuses valid values of ``spec``.

    Measured on the coverage collections, where these decided every schema
    llguidance served better (no invalid value gets through either way):

    - xgrammar writes an arbitrary JSON value (a schema ``{}``, an object or
      array schema that leaves its members open) with ``", "`` between
      members even in compact mode, so compact output such as ``[1,2]`` is
      refused there;
    - an array schema with ``minItems`` or ``maxItems`` and no ``items``
      admits only ``[]``;
    - a ``pattern`` or ``patternProperties`` name must match the whole
      string, where JSON Schema looks for it anywhere in the string.
    """
    if spec.kind is not RequestKind.JSON_SCHEMA:
        return False
    compact = not spec.options.any_whitespace
    pending: list[Any] = [json.loads(spec.text)]
    while pending:
        node = pending.pop()
        if node is True and compact:
            return True
        if not isinstance(node, dict):
            continue
        if _open_container(node, compact) or _searched_patterns(node):
            return True
        pending.extend(schema for schema, _ in subschemas(node, ""))
    return False


def _open_container(node: dict[str, Any], compact: bool) -> bool:
    if not node.keys() - _ANNOTATIONS:
        return compact  # any value at all
    types = type_set(node.get("type"))
    if "array" in types and not _ARRAY_SHAPE & node.keys():
        return compact or "minItems" in node or "maxItems" in node
    return compact and "object" in types and not _OBJECT_SHAPE & node.keys()


def _searched_patterns(node: dict[str, Any]) -> bool:
    names = node.get("patternProperties")
    patterns = [node.get("pattern"), *(names if isinstance(names, dict) else ())]
    return any(isinstance(p, str) and not _anchored(p) for p in patterns)


def _anchored(pattern: str) -> bool:
    """Whether ``pattern`` is anchored at both ends, so matching it whole is what it asks.

    Alternatives with anchors of their own (``^a|b$``) pass too: xgrammar
    serves those, as it did before this preference existed.
    """
    ends_with_anchor = pattern.endswith("$") and not pattern.endswith("\\$")
    return pattern.startswith("^") and ends_with_anchor


def _repeats_are_slow(text: str) -> bool:
    for match in _REGEX_REPEAT.finditer(text):
        low, high = match.group(1), match.group(2)
        if int(high or low) >= SLOW_REPEAT_COUNT:
            return True
    return False


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
    if (
        chosen.engine is not EngineName.LLGUIDANCE
        or chosen.findings
        or not slow
        or len(spec.text) >= QUICK_SPEC_CHARS
        or xgrammar_compile_estimate_s(spec) > UPGRADE_MAX_COMPILE_S
        or xgrammar_over_constrains(spec)
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
        return RoutedEngine(
            self.xgrammar.build(),
            self.llguidance.build(),
            self.selection,
            self.xgrammar.unenforced,
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
        slow = slow_for_xgrammar(spec)
        try:
            chosen = _route(spec, self._unenforced, self._selection, slow)
        except InvalidGrammarError as exc:
            # Refused: it compiles nowhere, so quickly, to its error.
            return _Decision(CompilePlan(quick=True), None, exc)
        plan = CompilePlan(
            part=chosen.engine.value,
            quick=chosen.engine is EngineName.LLGUIDANCE
            or (len(spec.text) < QUICK_SPEC_CHARS and not slow),
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
        return RoutedCompiled(engine, self._engines[engine].compile(spec))

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
