"""Warm-up files: parsed into the keys requests will have, bad lines skipped."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from unit_tests.conftest import COMPACT, SmallTokenizer
from vllm.v1.structured_output.backend_types import StructuredOutputOptions

from grammar_guard.core.compile.cache_entries import Admission
from grammar_guard.core.compile.in_thread import InThreadCompiler
from grammar_guard.core.compile.warmup import WarmUp, WarmupResult, parse_warmup, read_warmup_file
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.service import CompileService
from grammar_guard.core.settings import Settings
from grammar_guard.vllm_adapter.request_spec import spec_from_key

HANG_GUARD_S = 60.0
SCHEMA = '{"type": "object", "properties": {"ok": {"type": "boolean"}}}'


def test_each_kind_becomes_the_key_a_request_for_it_has() -> None:
    lines = [
        f'{{"kind": "json_schema", "grammar": {SCHEMA}}}',
        '{"kind": "json_schema", "grammar": "{\\"type\\": \\"string\\"}"}',  # as text
        '{"kind": "regex", "grammar": "[a-z]+"}',
        '{"kind": "choice", "grammar": ["yes", "no"]}',
        '{"kind": "grammar", "grammar": "root ::= \\"a\\""}',
        '{"kind": "json_object"}',
    ]
    plan = parse_warmup(lines, COMPACT, source="w.jsonl")
    assert plan.problems == []
    assert plan.specs == [
        spec_from_key(StructuredOutputOptions.JSON, SCHEMA, COMPACT),
        spec_from_key(StructuredOutputOptions.JSON, '{"type": "string"}', COMPACT),
        spec_from_key(StructuredOutputOptions.REGEX, "[a-z]+", COMPACT),
        spec_from_key(StructuredOutputOptions.CHOICE, '["yes", "no"]', COMPACT),
        spec_from_key(StructuredOutputOptions.GRAMMAR, 'root ::= "a"', COMPACT),
        spec_from_key(StructuredOutputOptions.JSON_OBJECT, "", COMPACT),
    ]


def test_blank_lines_comments_and_repeats_are_skipped_quietly() -> None:
    lines = ["", "   ", "# the schemas of the billing service", '{"kind": "regex", "grammar": "a"}']
    plan = parse_warmup([*lines, '{"kind": "regex", "grammar": "a"}'], COMPACT, source="w")
    assert plan.problems == [] and len(plan.specs) == 1


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{not json", "not JSON"),
        ('["regex", "a"]', "expected a JSON object"),
        ('{"kind": "jsonschema", "grammar": "{}"}', "unknown kind 'jsonschema'"),
        ('{"kind": "regex"}', "a regex entry needs a 'grammar'"),
        ('{"kind": "regex", "grammer": "a"}', "unknown field 'grammer'"),
        ('{"kind": "regex", "grammar": "a", "options": {"strict": true}}', "may only hold"),
        ('{"kind": "json_schema", "grammar": "[1, 2]"}', "must be a JSON object"),
        ('{"kind": "regex", "grammar": "a\\u0000"}', "control character"),
    ],
)
def test_a_bad_line_is_reported_with_its_number_and_the_rest_still_warms(
    line: str, problem: str
) -> None:
    plan = parse_warmup(
        ['{"kind": "regex", "grammar": "a"}', line, '{"kind": "regex", "grammar": "b"}'],
        COMPACT,
        source="warm.jsonl",
    )
    assert [spec.text for spec in plan.specs] == ["a", "b"]
    assert len(plan.problems) == 1
    assert plan.problems[0].startswith("warm.jsonl:2: ") and problem in plan.problems[0]


def test_options_in_a_line_override_the_engine_s() -> None:
    line = f'{{"kind": "json_schema", "grammar": {SCHEMA}, "options": {{"any_whitespace": true}}}}'
    (spec,) = parse_warmup([line], COMPACT, source="w").specs
    assert spec.options == CompileOptions(any_whitespace=True)
    # What the line does not name stays the engine's: an open-objects server
    # warms open keys, or it would never hit them.
    opened = CompileOptions(any_whitespace=False, open_objects=True)
    (spec,) = parse_warmup([line], opened, source="w").specs
    assert spec.options == CompileOptions(any_whitespace=True, open_objects=True)


def test_an_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    plan = read_warmup_file(tmp_path / "missing.jsonl", COMPACT)
    assert plan.specs == [] and "cannot read" in plan.problems[0]


# --- the background run -----------------------------------------------------------------


class HandAdmissions:
    """An ``admit`` whose answers the test gives; records how many were open at each call."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.open: list[Admission[Any]] = []
        self.open_at_admit: list[int] = []

    def __call__(self, spec: GrammarSpec) -> Admission[Any]:
        admission: Admission[Any] = Admission(spec, 0.0)
        with self._lock:
            self.open_at_admit.append(len(self.open))
            self.open.append(admission)
            self._lock.notify_all()
        return admission

    def answer_oldest(self, error: BaseException | None = None) -> None:
        with self._lock:
            assert self._lock.wait_for(lambda: self.open, HANG_GUARD_S)
            future: Future[Any] = self.open.pop(0).future
        future.set_running_or_notify_cancel()
        if error is None:
            future.set_result(object())
        else:
            future.set_exception(error)


def _specs(count: int) -> list[GrammarSpec]:
    return [GrammarSpec.build(RequestKind.REGEX, f"w{i}", COMPACT) for i in range(count)]


def test_at_most_parallel_entries_are_in_flight_and_every_one_reports() -> None:
    admit = HandAdmissions()
    reported: list[WarmupResult] = []
    finished: list[list[WarmupResult]] = []
    warmup = WarmUp(
        admit, _specs(5), parallel=2, on_result=reported.append, on_finished=finished.append
    )
    warmup.start()
    for index in range(5):
        admit.answer_oldest(InvalidGrammarError("bad") if index == 2 else None)
    assert warmup.wait(HANG_GUARD_S)
    assert max(admit.open_at_admit) <= 1  # never a third one while two were open
    assert [result.spec.text for result in reported] == [f"w{i}" for i in range(5)]
    assert [result.error is None for result in reported] == [True, True, False, True, True]
    assert finished == [reported]


def test_stop_admits_nothing_more() -> None:
    admit = HandAdmissions()
    warmup = WarmUp(admit, _specs(4), parallel=1)
    warmup.start()
    with admit._lock:
        assert admit._lock.wait_for(lambda: admit.open, HANG_GUARD_S)
    warmup.stop()
    admit.answer_oldest()
    assert warmup.wait(HANG_GUARD_S)
    assert len(admit.open_at_admit) == 1 and len(warmup.results) == 1


def test_warmed_grammars_are_cache_hits_for_requests(small: SmallTokenizer) -> None:
    settings = Settings(compile_workers=2)
    service = CompileService(small.engine, settings, compiler=InThreadCompiler(small.engine))
    try:
        plan = parse_warmup(
            ['{"kind": "regex", "grammar": "[a-c]+"}', '{"kind": "regex", "grammar": "(oops"}'],
            COMPACT,
            source="w",
        )
        warmup = WarmUp(service.admit, plan.specs, parallel=1)
        warmup.start()
        assert warmup.wait(HANG_GUARD_S)
        assert [result.error is None for result in warmup.results] == [True, False]
        request = service.admit(spec_from_key(StructuredOutputOptions.REGEX, "[a-c]+", COMPACT))
        assert request.hit and request.future.result() is not None
    finally:
        service.close("test over")
