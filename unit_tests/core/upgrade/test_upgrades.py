"""Reused keys move onto xgrammar in the background when its masks cost them less.

The routed small engines, compiles in threads, and mask costs the tests set
(the real trial's timings are tested apart); ``drain`` waits for the
upgrade the way a test waits for any compile (no sleeps).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from unit_tests.conftest import COMPACT, EOS, VOCAB, SmallTokenizer

from grammar_guard.core.compile import disk_store
from grammar_guard.core.compile.in_thread import Compiler, CompileResult, InThreadCompiler
from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.base import CompiledGrammar, CompilePlan, TokenMatcher
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedCompiled, RoutedEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import CompileCrashedError, InvalidGrammarError
from grammar_guard.core.masks.fill import fill_by_engine
from grammar_guard.core.masks.layout import words_per_row
from grammar_guard.core.metrics import LabelledCounter
from grammar_guard.core.request.spec import SMALL_SPEC_CHARS, GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings
from grammar_guard.core.upgrade.trial import PathRecorder, RecordedPath, fill_seconds
from grammar_guard.core.upgrade.upgrades import MaskCost

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
# An allOf of two patterns, which merge into no one schema: only llguidance enforces it.
LLGUIDANCE_ONLY = {
    "allOf": [{"type": "string", "maxLength": 12, "pattern": "^a+$"}, {"pattern": "^a{2,}$"}]
}


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


# The trial's mask costs, by engine: xgrammar's the cheaper, or the dearer.
XGRAMMAR_CHEAPER: dict[str, float | None] = {"xgrammar": 1.0, "llguidance": 2.0}
XGRAMMAR_DEARER: dict[str, float | None] = {"xgrammar": 2.0, "llguidance": 2.0}
# What a request of LONG_STRING writes: long enough to record a path.
WRITTEN = '{"a":"hello world"}'


def _costs(costs: dict[str, float | None]) -> MaskCost:
    return lambda compiled, _path: costs[compiled.engine_name]


def _service(
    routed: RoutedEngine,
    costs: dict[str, float | None] = XGRAMMAR_CHEAPER,
    compiler: Compiler | None = None,
    **settings: Any,
) -> CompileService:
    return CompileService(
        routed,
        Settings(compile_workers=1, **settings),
        compiler=compiler,
        mask_cost=_costs(costs),
    )


def _decode(service: CompileService, spec: GrammarSpec, text: str = WRITTEN) -> RoutedCompiled:
    """One request of ``spec`` that writes ``text`` to its end; the grammar it was given."""
    compiled = _served(service, spec)
    matcher = service.new_matcher(spec, compiled, stop_token_ids=None, max_rollback_tokens=0)
    assert _feed(matcher, text)
    return compiled


@pytest.fixture
def services() -> Iterator[list[CompileService]]:
    started: list[CompileService] = []
    yield started
    for service in started:
        service.close("test over")


def _engines_served(service: CompileService, spec: GrammarSpec, requests: int) -> list[EngineName]:
    """The engine each of ``requests`` decoded requests got, each one's upgrade work drained."""
    engines = []
    for _ in range(requests):
        engines.append(_decode(service, spec).engine)
        assert service.drain(HANG_GUARD_S)
    return engines


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
        ({"type": "array", "uniqueItems": True}, None),  # refused everywhere
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
    first = _decode(service, spec)  # records the path the trial replays
    assert first.engine is EngineName.LLGUIDANCE
    in_flight = service.new_matcher(spec, first, stop_token_ids=None, max_rollback_tokens=0)
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


def test_a_key_whose_xgrammar_masks_are_not_cheaper_stays_on_llguidance_for_good(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    service = _service(routed, XGRAMMAR_DEARER)
    services.append(service)
    spec = _json(LONG_STRING)
    assert _engines_served(service, spec, 4) == [EngineName.LLGUIDANCE] * 4
    assert _upgrades(service) == {"slower": 1}


def test_no_upgrade_starts_before_a_request_has_shown_the_key_s_path(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    service = _service(routed)
    services.append(service)
    spec = _json(LONG_STRING)
    first = _served(service, spec)
    recording = service.new_matcher(spec, first, stop_token_ids=None, max_rollback_tokens=0)
    for _ in range(3):  # reused, but nothing decoded yet
        _served(service, spec)
        assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {}
    assert _feed(recording, WRITTEN)
    _served(service, spec)
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {"done": 1}


def test_a_first_request_cut_short_leaves_the_recording_to_a_later_one(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    service = _service(routed)
    services.append(service)
    spec = _json(LONG_STRING)
    short = service.new_matcher(
        spec, _served(service, spec), stop_token_ids=None, max_rollback_tokens=0
    )
    assert short.accept_token(VOCAB.index("{"))  # max_tokens=1: it ends here, path unready
    _decode(service, spec)  # the reuse, decoded whole: its path is the one replayed
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {}
    assert _served(service, spec).engine is EngineName.LLGUIDANCE
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {"done": 1}
    assert _served(service, spec).engine is EngineName.XGRAMMAR


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
        assert _engines_served(service, spec, len(engines)) == engines


class _PartCompiles(InThreadCompiler):
    """Compiles in the thread; a compile on a named part (an upgrade) runs ``before`` first."""

    def __init__(self, engine: RoutedEngine, before: Callable[[], None]) -> None:
        super().__init__(engine)
        self._before = before

    def compile(self, spec: GrammarSpec, part: str | None = None) -> CompileResult:
        if part is not None:
            self._before()
        return super().compile(spec, part)


# The upgrade's own compile failures: retrying either would cost the same again.
UPGRADE_REFUSALS = {
    "hard limit": InvalidGrammarError("grammar compile was stopped after its hard limit of 1 s"),
    # Retried, it would kill a compile worker on every later request of the key.
    "worker killed": CompileCrashedError("the grammar compile process died (signal 9: Killed)"),
}


@pytest.mark.parametrize("refusal", UPGRADE_REFUSALS)
def test_a_failed_upgrade_leaves_the_key_where_it_was_and_is_not_retried(
    routed: RoutedEngine, services: list[CompileService], refusal: str
) -> None:
    refused: list[str] = []

    def refuse() -> None:
        refused.append("xgrammar")
        raise UPGRADE_REFUSALS[refusal]

    service = _service(routed, compiler=_PartCompiles(routed, refuse))
    services.append(service)
    spec = _json(LONG_STRING)
    assert _engines_served(service, spec, 4) == [EngineName.LLGUIDANCE] * 4
    assert refused == ["xgrammar"]
    assert _upgrades(service) == {"failed": 1}


def test_an_upgrade_lost_to_its_compile_worker_is_tried_again_by_a_later_request(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    # The loss is reported only once the request that started the upgrade has
    # decoded, so no request records a new path while the upgrade is out.
    decoded = threading.Event()
    lost: list[str] = []

    def lose_the_first() -> None:
        if not lost:
            lost.append("xgrammar")
            assert decoded.wait(HANG_GUARD_S), "the test never reported the decode"
            raise RuntimeError("the grammar compile process could not start: not ready")

    service = _service(routed, compiler=_PartCompiles(routed, lose_the_first))
    services.append(service)
    spec = _json(LONG_STRING)
    first = [_decode(service, spec).engine for _ in range(2)]  # the second starts it
    decoded.set()
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {"failed": 1}
    assert first + _engines_served(service, spec, 2) == [EngineName.LLGUIDANCE] * 3 + [
        EngineName.XGRAMMAR
    ]
    assert _upgrades(service) == {"failed": 1, "done": 1}


def test_a_new_grammar_that_refuses_the_recorded_path_is_not_served(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    service = _service(routed, {"xgrammar": None, "llguidance": 1.0})
    services.append(service)
    spec = _json(LONG_STRING)
    assert _engines_served(service, spec, 3) == [EngineName.LLGUIDANCE] * 3
    assert _upgrades(service) == {"failed": 1}


def test_an_upgraded_grammar_replaces_the_first_in_the_cache_folder(
    routed: RoutedEngine,
    services: list[CompileService],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Milliseconds of compile, which no load pays for: keep every file, as for a slow compile.
    monkeypatch.setattr(disk_store, "pays", lambda _load_s, _compile_s: True)
    spec = _json(LONG_STRING)
    before = _service(routed, cache_dir=tmp_path)
    services.append(before)
    _decode(before, spec)
    _served(before, spec)
    assert before.drain(HANG_GUARD_S)
    restarted = _service(routed, cache_dir=tmp_path)
    services.append(restarted)
    # A restart starts on the upgraded grammar, and has nothing to upgrade.
    for _ in range(3):
        assert _decode(restarted, spec).engine is EngineName.XGRAMMAR
        assert restarted.drain(HANG_GUARD_S)
    assert _upgrades(restarted) == {}


def test_an_upgrade_of_a_key_that_left_the_cache_is_dropped(
    routed: RoutedEngine, services: list[CompileService]
) -> None:
    release = threading.Event()

    def held() -> None:
        assert release.wait(HANG_GUARD_S), "the test never released the upgrade"

    service = _service(routed, compiler=_PartCompiles(routed, held), max_entries=1)
    services.append(service)
    spec = _json(LONG_STRING)
    _decode(service, spec)
    _served(service, spec)  # starts the upgrade, held
    _served(service, _json(PLAIN))  # evicts the key: one entry allowed
    release.set()
    assert service.drain(HANG_GUARD_S)
    assert _upgrades(service) == {"dropped": 1}
    assert _served(service, spec).engine is EngineName.LLGUIDANCE  # compiled anew, as first


def _ids(text: str) -> list[int]:
    return [VOCAB.index(char) for char in text]


def test_a_recorded_path_holds_the_accepted_tokens_without_rollbacks_or_the_stop_token(
    routed: RoutedEngine,
) -> None:
    spec = _json(LONG_STRING)
    compiled = routed.compile(spec)
    path = RecordedPath()
    recorder = PathRecorder(
        routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=4), path
    )
    assert all(recorder.accept_token(token) for token in _ids('{"a":"hey'))
    recorder.rollback(2)
    assert not recorder.accept_token(VOCAB.index(EOS))  # inside the string: refused, not recorded
    assert all(recorder.accept_token(token) for token in _ids('ello"}'))
    assert not path.finished
    assert recorder.accept_token(VOCAB.index(EOS))
    assert path.finished and path.ready
    assert path.tokens == _ids('{"a":"hello"}')


def test_the_trial_replays_the_path_and_a_refused_one_costs_nothing(routed: RoutedEngine) -> None:
    spec = _json(LONG_STRING)
    path = _ids('{"a":"hello"}')
    for engine in EngineName:
        compiled = routed.compile_on(spec, engine)
        seconds = fill_seconds(routed, compiled, path)
        assert seconds is not None and seconds > 0
        assert fill_seconds(routed, compiled, _ids('{"b"')) is None


def test_a_recorder_batch_fills_as_its_matchers_would(routed: RoutedEngine) -> None:
    matchers = [
        routed.new_matcher(
            routed.compile(_json(schema)), stop_token_ids=None, max_rollback_tokens=0
        )
        for schema in (PLAIN, LONG_STRING)
    ]
    recorders = [PathRecorder(matcher, RecordedPath()) for matcher in matchers]
    width = words_per_row(len(VOCAB))
    expected = torch.zeros((2, width), dtype=torch.int32)
    fill_by_engine(matchers, expected, [0, 1], threads=1)
    filled = torch.zeros((2, width), dtype=torch.int32)
    fill_by_engine(recorders, filled, [0, 1], threads=1)
    assert torch.equal(filled, expected)


class _PlanThreads(RoutedEngine):
    """The routed small engines; records which threads asked for a plan."""

    def __init__(self, xgrammar: XGrammarEngine, llguidance: LLGuidanceEngine) -> None:
        super().__init__(xgrammar, llguidance)
        self.threads: set[int] = set()

    def plan(self, spec: GrammarSpec) -> CompilePlan:
        self.threads.add(threading.get_ident())
        return super().plan(spec)


def test_the_admitting_thread_never_plans_a_large_key(
    small: SmallTokenizer,
    small_llguidance: LLGuidanceEngine,
    routed: RoutedEngine,
    services: list[CompileService],
) -> None:
    engine = _PlanThreads(small.engine, small_llguidance)
    service = CompileService(engine, Settings(compile_workers=1), mask_cost=_costs({}))
    services.append(service)
    large = _json({**LONG_STRING, "description": "x" * SMALL_SPEC_CHARS})
    for _ in range(3):  # a miss, then hits: none may parse the spec here
        compiled = _served(service, large)
        service.new_matcher(large, compiled, stop_token_ids=None, max_rollback_tokens=0)
    assert service.drain(HANG_GUARD_S)
    assert engine.threads and threading.get_ident() not in engine.threads
    assert routed.plan(large).upgrade is None
