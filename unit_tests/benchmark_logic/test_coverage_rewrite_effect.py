"""The coverage report's refusals per keyword, without and with the plugin's schema rewrite.

The tally and the tables from fake results; turning the rewrite off with the
real plugin, and the loud failure when a module the switch does not know
still holds the rewrite.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
from benchmarks.coverage.cases import PROJECT_CASES, TEST_SUITE, Selection, discover, suite_folder
from benchmarks.coverage.report import build_report, render_overview, render_tables
from benchmarks.coverage.results import (
    COMPILED,
    PATHS,
    PLUGIN_PATH,
    VLLM_XGRAMMAR_PATH,
    CaseRef,
    PathResult,
    SchemaResult,
    WrongResult,
)
from benchmarks.coverage.rewrite_effect import (
    INVALID_SCHEMA,
    Refusals,
    check_refusals,
    refusal_labels,
    rewrite_turned_off,
    tally_keywords,
)

from grammar_guard.core.request.spec import CompileOptions
from grammar_guard.core.schema import rewrite

COMPACT = CompileOptions(any_whitespace=False)
# Served only as rewritten: the format becomes its pattern, which xgrammar enforces.
DATE = {"type": "string", "format": "date"}
PLAIN = {"type": "integer"}


def _ref(name: str, valid: int, suite: str = TEST_SUITE) -> CaseRef:
    return CaseRef(suite, f"{name}.json", 0, name, "", valid, 1)


def _refusals() -> list[Refusals]:
    def row(name: str, valid: int, without: set[str], with_rewrite: set[str]) -> Refusals:
        return Refusals(_ref(name, valid), frozenset(without), frozenset(with_rewrite))

    return [
        row("merged", 3, {"allOf"}, set()),
        row("format", 2, {"format", "allOf"}, {"format"}),
        row("revealed", 1, set(), {"not"}),
        row("broken", 4, {INVALID_SCHEMA}, {INVALID_SCHEMA}),
        row("served", 5, set(), set()),
    ]


def test_the_tally_counts_schemas_and_their_valid_instances_per_keyword() -> None:
    tally = tally_keywords(_refusals(), shown=2)
    rows = {row["keyword"]: row for row in tally["keywords"]}
    # Most refused without the rewrite first; then with it; then by name.
    assert [row["keyword"] for row in tally["keywords"]] == [
        "allOf",
        "format",
        INVALID_SCHEMA,
        "not",
    ]
    assert rows["allOf"] == {
        "keyword": "allOf",
        "without": 2,
        "with": 0,
        "valid_without": 5,
        "valid_with": 0,
    }
    assert rows["not"] == {
        "keyword": "not",
        "without": 0,
        "with": 1,
        "valid_without": 0,
        "valid_with": 1,
    }
    # "other": each schema naming a keyword past the first two, once.
    assert tally["other"] == {"without": 1, "with": 2, "valid_without": 4, "valid_with": 5}
    assert tally["total"] == {"without": 3, "with": 3, "valid_without": 9, "valid_with": 7}
    assert tally["schemas"] == 5
    assert tally_keywords(_refusals())["other"] is None


def _result(ref: CaseRef, accepted: int, lies: int) -> SchemaResult:
    paths = {
        path: PathResult(path, COMPILED, valid_accepted=accepted, invalid_rejected=1 - lies)
        for path in PATHS
    }
    if lies:
        paths[VLLM_XGRAMMAR_PATH].invalid_rejected = 0
        paths[VLLM_XGRAMMAR_PATH].wrong.append(WrongResult(0, "lie", False, '{"a":}', None))
    return SchemaResult(ref, paths)


def _report() -> dict[str, object]:
    results = [
        _result(_ref("shared", 2), accepted=2, lies=0),
        _result(_ref("number-ranges", 3, PROJECT_CASES), accepted=1, lies=1),
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
    return build_report(results, run, tally_keywords(_refusals(), shown=2))


def test_the_overview_keeps_the_project_cases_out_of_the_headline() -> None:
    report = _report()
    assert report["overall_suites"] == [TEST_SUITE]
    overview = render_overview(report)
    headline = next(line for line in overview.splitlines() if line.startswith(f"| {PLUGIN_PATH} "))
    assert "| 2 / 2 (100.0%) |" in headline
    assert f"those of {PROJECT_CASES} are in the per-collection table below" in overview
    collections = [line for line in overview.splitlines() if line.startswith("| vllm-xgrammar |")]
    # The headline's row, then the per-collection one: test-suite's, then the cases' with the lie.
    assert collections[1] == "| vllm-xgrammar | 2 / 2 (100.0%) | 0 | 1 / 3 (33.3%) | 1 |"


def test_the_keyword_table_is_in_the_overview_and_the_tables() -> None:
    report = _report()
    for text in (render_overview(report), render_tables(report)):
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("| keyword |"))
        assert lines[start + 2 : start + 6] == [
            "| allOf | 2 | 0 | 5 | 0 |",
            "| format | 1 | 1 | 2 | 2 |",
            "| other | 1 | 2 | 4 | 5 |",
            "| **any (schemas refused)** | 3 | 3 | 9 | 7 |",
        ]


def test_turning_the_rewrite_off_serves_the_schema_as_sent() -> None:
    assert refusal_labels(DATE, COMPACT) == frozenset()
    with rewrite_turned_off():
        assert refusal_labels(DATE, COMPACT) == frozenset({"format"})
        assert refusal_labels(PLAIN, COMPACT) == frozenset()
    assert rewrite.rewritten_schema_text.cache_info().currsize == 0
    assert refusal_labels(DATE, COMPACT) == frozenset()


def test_a_module_holding_the_rewrite_unpatched_fails_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planted = types.ModuleType("grammar_guard.planted")
    planted.rewritten_schema_text = rewrite.rewritten_schema_text  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, planted.__name__, planted)
    unpatched = re.escape("grammar_guard.planted.rewritten_schema_text")
    with pytest.raises(RuntimeError, match=unpatched), rewrite_turned_off():
        pass
    # The patches are undone.
    assert refusal_labels(DATE, COMPACT) == frozenset()


def test_each_schema_is_checked_without_and_with_the_rewrite(tmp_path: Path) -> None:
    folder = suite_folder(tmp_path, TEST_SUITE)
    folder.mkdir(parents=True)
    groups = [{"description": "", "schema": schema, "tests": []} for schema in (DATE, PLAIN, 1)]
    (folder / "cases.json").write_text(json.dumps(groups), encoding="utf-8")
    refs = discover(tmp_path, Selection(suites=(TEST_SUITE,)))
    rows = check_refusals(tmp_path, refs, whitespace=False)
    assert [(row.without, row.with_rewrite) for row in rows] == [
        (frozenset({"format"}), frozenset()),
        (frozenset(), frozenset()),
        (frozenset({INVALID_SCHEMA}), frozenset({INVALID_SCHEMA})),
    ]
