"""Reused keys move onto xgrammar in the background; requests in flight keep what they have.

The routed small engines, compiles in threads; ``drain`` waits for the
upgrade the way a test waits for any compile (no sleeps).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unit_tests.conftest import COMPACT, EOS, VOCAB

from grammar_guard.core.compile_service import CompileService
from grammar_guard.core.compilers import CompileResult, InThreadCompiler
from grammar_guard.core.engine import CompiledGrammar, TokenMatcher
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.metrics import LabelledCounter
from grammar_guard.core.routing import EngineName, RoutedCompiled, RoutedEngine
from grammar_guard.core.settings import CacheSettings
from grammar_guard.core.spec import GrammarSpec, RequestKind

HANG_GUARD_S = 60.0

# Bounded strings: llguidance compiles them at once, xgrammar enforces them too.
LONG_STRING = {
    "type": "object",
    "properties": {"a": {"type": "string", "maxLength": 12}},
    "required": ["a"],
}
PLAIN = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
# Bounded too, but a member left open: xgrammar would refuse compact values of it.
OPEN_MEMBER = {
    "type": "object",
    "properties": {"a": {"type": "string", "maxLength": 12}, "meta": {"type": "object"}},
    "required": ["a", "meta"],
}
# allOf: only llguidance enforces it.
LLGUIDANCE_ONLY = {"allOf": [{"type": "string", "maxLength": 12}, {"minLength": 2}]}


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


def _service(routed: RoutedEngine, **settings: Any) -> CompileService:
    return CompileService(routed, CacheSettings(compile_workers=1, **settings))


@pytest.fixture
def services() -> Iterator[list[CompileService]]:
    started: list[CompileService] = []
    yield started
    for service in started:
        service.close("test over")


def _served(service: CompileService, spec: GrammarSpec) -> RoutedCompiled:
    compiled = service.admit(spec).future.result(timeout=HANG_GUARD_S)
    assert isinstance(compiled, RoutedCompiled)
    return compiled


def _upgrades(service: CompileService) -> dict[str, int]:
    return service.metrics.snapshot().labelled_values(LabelledCounter.UPGRADES)


def _accepts(routed: RoutedEngine, compiled: CompiledGrammar, text: str) -> bool:
    matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    return _feed(matcher, text)


def _feed(matcher: TokenMatcher, text: str) -> bool:
    tokens = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in tokens) and matcher.is_terminated()


@pytest.mark.parametrize(
    ("schema", "upgrade"),
    [
        (LONG_STRING, EngineName.XGRAMMAR.value),
        (PLAIN, None),  # on xgrammar already
        (OPEN_MEMBER, None),  # xgrammar would not enforce the same language
        (LLGUIDANCE_ONLY, None),  # xgrammar does not enforce allOf
        ({"type": "array", "contains": {}}, None),  # refused everywhere
    ],
)
def test_only_a_key_sent_to_llguidance_for_xgrammar_s_compile_time_has_an_upgrade(
    routed: RoutedEngine, schema: Any, upgrade: str | None
) -> None:
    assert routed.plan(_json(schema)).upgrade == upgrade


def test_a_reused_key_moves_to_xgrammar_and_a_request_in_flight_keeps_its_grammar(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    service = _service(routed)
    services.append(service)
    spec = _json(LONG_STRING)
    first = _served(service, spec)
    assert first.engine is EngineName.LLGUIDANCE
    in_flight = routed.new_matcher(first, stop_token_ids=None, max_rollback_tokens=0)
    assert in_flight.accept_token(VOCAB.index("{"))
    # The second request is the reuse: served on llguidance still, upgrade started.
    assert _served(service, spec).engine is EngineName.LLGUIDANCE
    assert service.drain(HANG_GUARD_S)
    upgraded = _served(service, spec)
    assert upgraded.engine is EngineName.XGRAMMAR
    assert _upgrades(service) == {"done": 1}
    # The request that started on llguidance finishes there.
    assert _feed(in_flight, '"a":"hello"}')
    for text, valid in [('{"a":"hello"}', True), ('{"a":"' + "x" * 13 + '"}', False)]:
        assert _accepts(routed, first, text) is valid
        assert _accepts(routed, upgraded, text) is valid


def test_upgrade_after_sets_the_request_that_starts_it_and_zero_never_does(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    spec = _json(LONG_STRING)
    later = _service(routed, upgrade_after=3)
    never = _service(routed, upgrade_after=0)
    services.extend([later, never])
    for service, engines in (
        (later, [EngineName.LLGUIDANCE] * 3 + [EngineName.XGRAMMAR]),
        (never, [EngineName.LLGUIDANCE] * 4),
    ):
        served = []
        for _ in engines:
            served.append(_served(service, spec).engine)
            assert service.drain(HANG_GUARD_S)
        assert served == engines


class _RefusingXGrammar(InThreadCompiler):
    """Compiles in the thread, but every xgrammar compile fails."""

    def __init__(self, engine: RoutedEngine) -> None:
        super().__init__(engine)
        self.refused = 0

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        if part == EngineName.XGRAMMAR.value:
            self.refused += 1
            raise InvalidGrammarError("grammar compile was stopped after its hard limit of 1 s")
        return super().compile(spec, part)


def test_a_failed_upgrade_leaves_the_key_where_it_was_and_is_not_retried(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    compiler = _RefusingXGrammar(routed)
    service = CompileService(routed, CacheSettings(compile_workers=1), compiler=compiler)
    services.append(service)
    spec = _json(LONG_STRING)
    for _ in range(4):
        assert _served(service, spec).engine is EngineName.LLGUIDANCE
        assert service.drain(HANG_GUARD_S)
    assert compiler.refused == 1
    assert _upgrades(service) == {"failed": 1}


def test_an_upgraded_grammar_replaces_the_first_in_the_cache_folder(
    routed: RoutedEngine, services: list[CompileService], tmp_path: Path
) -> None:
    spec = _json(LONG_STRING)
    before = _service(routed, cache_dir=tmp_path)
    services.append(before)
    _served(before, spec)
    _served(before, spec)
    assert before.drain(HANG_GUARD_S)
    restarted = _service(routed, cache_dir=tmp_path)
    services.append(restarted)
    # A restart starts on the upgraded grammar, and has nothing to upgrade.
    for _ in range(3):
        assert _served(restarted, spec).engine is EngineName.XGRAMMAR
        assert restarted.drain(HANG_GUARD_S)
    assert _upgrades(restarted) == {}


class _HeldUpgrades(InThreadCompiler):
    """Compiles in the thread; an upgrade (a compile on a named part) waits for the test."""

    def __init__(self, engine: RoutedEngine) -> None:
        super().__init__(engine)
        self.release = threading.Event()

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        if part == EngineName.XGRAMMAR.value:
            assert self.release.wait(HANG_GUARD_S), "the test never released the upgrade"
        return super().compile(spec, part)


def test_an_upgrade_of_a_key_that_left_the_cache_is_dropped(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    compiler = _HeldUpgrades(routed)
    service = CompileService(
        routed, CacheSettings(compile_workers=1, max_entries=1), compiler=compiler
    )
    services.append(service)
    spec = _json(LONG_STRING)
    _served(service, spec)
    _served(service, spec)  # starts the upgrade, held
    _served(service, _json(PLAIN))  # evicts the key: one entry allowed
    compiler.release.set()
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {"dropped": 1}
    assert _served(service, spec).engine is EngineName.LLGUIDANCE  # compiled anew, as first
