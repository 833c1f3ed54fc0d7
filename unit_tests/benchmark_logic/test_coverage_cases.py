"""The coverage benchmark's own cases (data/coverage-cases/) and instances given as raw text.

grammar-guard's cases are a third collection, read from the repository's
data/ whichever folder ``--data`` names, and kept out of the headline figures
of the two shared collections. A test may give ``"text"`` instead of
``"data"``: output that is no JSON value at all, fed to the grammar exactly
as written and always invalid.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from benchmarks.coverage.__main__ import _arguments
from benchmarks.coverage.report import build_report, render_overview
from benchmarks.coverage.results import (
    COMPILED,
    PATHS,
    PLUGIN_PATH,
    VLLM_XGRAMMAR_PATH,
    PathResult,
    SchemaResult,
    WrongResult,
)
from harness.schema_data.cases import (
    PROJECT_CASES,
    SAMPLE_DATA_DIR,
    SHARED_SUITES,
    SUITES,
    TEST_SUITE,
    CaseRef,
    NumberLiteral,
    RawText,
    Selection,
    discover,
    headline_suites,
    load_case,
    suite_folder,
)
from harness.schema_data.writer import InstanceWriter, Layout, Written

REPO = Path(__file__).resolve().parents[2]
NUMBER_RANGES = "number-ranges.json"
STOP = 100


def _write_suite_file(data_dir: Path, groups: list[dict[str, Any]]) -> None:
    folder = suite_folder(data_dir, TEST_SUITE)
    folder.mkdir(parents=True)
    (folder / "cases.json").write_text(json.dumps(groups), encoding="utf-8")


def test_the_project_cases_are_in_a_default_run_and_out_of_the_shared_default() -> None:
    assert (*SHARED_SUITES, PROJECT_CASES) == SUITES
    assert _arguments([]).suite == "all"
    # discover()'s other readers (dead-end walk, upgrade-language test) keep the shared ones.
    assert tuple(Selection().suites) == SHARED_SUITES
    assert PROJECT_CASES in (REPO / "data" / "README.md").read_text(encoding="utf-8")


def test_the_project_cases_are_read_from_the_repository_whatever_data_is_given(
    tmp_path: Path,
) -> None:
    assert suite_folder(tmp_path, PROJECT_CASES) == SAMPLE_DATA_DIR / "coverage-cases"
    refs = discover(tmp_path, Selection(suites=(PROJECT_CASES,)))
    assert {ref.file for ref in refs} >= {NUMBER_RANGES}
    assert all(ref.category == ref.file.removesuffix(".json") for ref in refs)


def test_the_headline_counts_the_shared_collections_when_a_run_has_them() -> None:
    assert headline_suites(SUITES) == SHARED_SUITES
    assert headline_suites([PROJECT_CASES, TEST_SUITE]) == (TEST_SUITE,)
    assert headline_suites([PROJECT_CASES]) == (PROJECT_CASES,)


def _result(name: str, suite: str, valid: int, accepted: int, *, lies: bool) -> SchemaResult:
    ref = CaseRef(suite, f"{name}.json", 0, name, "", valid, 1)
    paths = {
        path: PathResult(path, COMPILED, valid_accepted=accepted, invalid_rejected=1 - lies)
        for path in PATHS
    }
    if lies:
        paths[VLLM_XGRAMMAR_PATH].invalid_rejected = 0
        paths[VLLM_XGRAMMAR_PATH].wrong.append(WrongResult(0, "lie", False, '{"a":}', None))
    return SchemaResult(ref, paths)


def test_the_overview_keeps_the_project_cases_out_of_the_headline() -> None:
    results = [
        _result("shared", TEST_SUITE, valid=2, accepted=2, lies=False),
        _result("number-ranges", PROJECT_CASES, valid=3, accepted=1, lies=True),
    ]
    run = {
        "suites": [TEST_SUITE, PROJECT_CASES],
        "schemas": 2,
        "whitespace": False,
        "timeout_s": 10,
        "workers": 2,
        "duration_s": 60,
        "versions": {},
        "unenforced_keyword_error": True,
        "plugin_settings": {},
    }
    report = build_report(results, run)
    assert report["overall_suites"] == [TEST_SUITE]
    overview = render_overview(report)
    headline = next(line for line in overview.splitlines() if line.startswith(f"| {PLUGIN_PATH} "))
    assert "| 2 / 2 (100.0%) |" in headline
    assert f"those of {PROJECT_CASES} are in the per-collection table below" in overview
    collections = [line for line in overview.splitlines() if line.startswith("| vllm-xgrammar |")]
    # The headline's row, then the per-collection one: test-suite's, then the cases' with the lie.
    assert collections[1] == "| vllm-xgrammar | 2 / 2 (100.0%) | 0 | 1 / 3 (33.3%) | 1 |"


def test_a_text_instance_is_loaded_as_raw_text_and_counted_invalid() -> None:
    (first, *_) = discover(
        SAMPLE_DATA_DIR, Selection(suites=(PROJECT_CASES,), files=(NUMBER_RANGES,))
    )
    case = load_case(SAMPLE_DATA_DIR, first)
    raw = [instance for instance in case.instances if isinstance(instance.data, RawText)]
    assert [(instance.data.text, instance.valid) for instance in raw] == [('{"a":}', False)]
    # Numbers keep the text the file wrote: that text is what the grammar is fed.
    assert case.instances[0].data == {"a": NumberLiteral("1.5e-10")}
    assert case.instances[1].data == {"a": NumberLiteral("0.00000000015")}
    assert (first.valid_total, first.invalid_total) == (2, 3)


@pytest.mark.parametrize(
    "test",
    [
        {"description": "text marked valid", "text": "{}", "valid": True},
        {"description": "text and data", "text": "{}", "data": {}, "valid": False},
        {"description": "text that is not a string", "text": {}, "valid": False},
    ],
)
def test_a_text_instance_must_be_one_invalid_string(tmp_path: Path, test: dict[str, Any]) -> None:
    _write_suite_file(tmp_path, [{"description": "g", "schema": {}, "tests": [test]}])
    with pytest.raises(ValueError, match="text"):
        for ref in discover(tmp_path, Selection(suites=(TEST_SUITE,))):
            load_case(tmp_path, ref)


class _Grammar:
    """Accepts the tokens of ``allowed`` (a prefix of them, as validate_tokens does), then stops."""

    def __init__(self, allowed: str) -> None:
        self._allowed = [ord(character) for character in allowed]
        self._fed: list[int] = []
        self._done = False

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        expected = self._allowed[len(self._fed) :]
        taken = 0
        while taken < len(tokens) and taken < len(expected) and tokens[taken] == expected[taken]:
            taken += 1
        return tokens[:taken]

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        if tokens == [STOP]:
            self._done = self._fed == self._allowed
            return self._done
        self._fed += tokens
        return True

    def is_terminated(self) -> bool:
        return self._done

    def fill_bitmask(self, bitmask: Any, idx: int) -> None:
        bitmask[idx, :] = -1 if self._fed == self._allowed else 0


def _write(grammar: _Grammar, text: str) -> Written:
    writer = InstanceWriter(
        grammar,
        lambda piece: [ord(character) for character in piece],
        STOP,
        Layout(whitespace=False),
        {},
        np.zeros((1, 4), dtype=np.int32),
        integer_forms=False,
    )
    return writer.write(RawText(text))


def test_a_text_instance_is_fed_exactly_as_written() -> None:
    accepted = _write(_Grammar('{"a":}'), '{"a":}')
    assert (accepted.accepted, accepted.text, accepted.refused_at) == (True, '{"a":}', None)
    assert accepted.tokens == (*map(ord, '{"a":}'), STOP)
    refused = _write(_Grammar('{"a":1}'), '{"a":}')
    assert (refused.accepted, refused.text, refused.refused_at) == (False, '{"a":}', 0)
