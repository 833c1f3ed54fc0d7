"""The repository's own data (data/), and the benchmarks' choice between it and ``--data``.

The tests read data/: the whole JSON-Schema-Test-Suite draft 2020-12 and a
sample of jsonschemabench (scripts/sample_test_data.py). A fresh clone has
nothing else, so every file the repository names must be in the sample. The
coverage benchmark reads the full collections given with
``--data DIR``; without it it runs on the sample and says so, and a full
``python -m benchmarks all`` skips it rather than write the sample's figures
into the docs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmarks.__main__ import main as benchmarks_main
from benchmarks.suite import (
    BENCHMARKS,
    NEEDS_DATA,
    SKIPPED,
    RunOptions,
    command_line,
    run_benchmark,
    skip_reason,
)
from harness.schema_data.cases import (
    JSONSCHEMABENCH,
    SAMPLE_DATA_DIR,
    SAMPLE_MANIFEST,
    Selection,
    category_of,
    data_dir_or_sample,
    discover,
    suite_folder,
)

REPO = Path(__file__).resolve().parents[2]
SUITE = SAMPLE_DATA_DIR / "json-schema-test-suite"
BENCH = suite_folder(SAMPLE_DATA_DIR, JSONSCHEMABENCH)
# Where code names jsonschemabench files it reads. Not docs/: a coverage run on the
# full collections writes the names of its schemas there, and reads none of them.
NAMING_PLACES = ("unit_tests", "integration_tests", "benchmarks", "harness")
# A jsonschemabench file name: ``<category>---<name>.json``, ``BFCL_<kind>_<n>.json``, ...
_BENCH_NAME = re.compile(r"[A-Za-z0-9_]+---[A-Za-z0-9_.\-]+?\.json|(?:BFCL_[a-z_]+|JME)_\d+\.json")
FULL_DATA = ("coverage",)


def _manifest() -> dict[str, object]:
    loaded = json.loads((SAMPLE_DATA_DIR / SAMPLE_MANIFEST).read_text(encoding="utf-8"))
    bench: dict[str, object] = loaded[JSONSCHEMABENCH]
    return bench


def _sampled() -> set[str]:
    return {path.name for path in BENCH.glob("*.json")}


def test_the_whole_test_suite_is_carried_with_its_license() -> None:
    assert "MIT" in (REPO / "data" / "README.md").read_text(encoding="utf-8")
    assert "Permission is hereby granted" in (SUITE / "LICENSE").read_text(encoding="utf-8")
    assert len(list((SUITE / "tests" / "draft2020-12").rglob("*.json"))) >= 80
    assert (SUITE / "remotes" / "integer.json").is_file()


def test_the_sample_is_what_its_manifest_says() -> None:
    manifest = _manifest()
    reasons = manifest["reasons"]
    categories = manifest["categories"]
    assert isinstance(reasons, dict) and isinstance(categories, dict)
    assert set(reasons) == _sampled()
    assert manifest["sampled"] == len(reasons)
    counted: dict[str, int] = {}
    for name in _sampled():
        category = category_of(JSONSCHEMABENCH, name)
        counted[category] = counted.get(category, 0) + 1
    # Every category of the full collection is in the sample, at least its first three.
    assert counted == {name: sizes["sampled"] for name, sizes in categories.items()}
    assert all(count >= 3 for count in counted.values())
    assert sum(sizes["files"] for sizes in categories.values()) == manifest["files"]


def test_every_jsonschemabench_file_the_code_names_is_in_the_sample() -> None:
    named: set[str] = set()
    for place in NAMING_PLACES:
        root = REPO / place
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.suffix == ".py" and path.is_file():
                named.update(_BENCH_NAME.findall(path.read_text(encoding="utf-8")))
    assert len(named) >= 30, sorted(named)
    assert sorted(named - _sampled()) == []


def test_the_dead_end_walks_slice_has_every_category() -> None:
    refs = discover(SAMPLE_DATA_DIR, Selection(suites=(JSONSCHEMABENCH,), limit=3))
    categories = _manifest()["categories"]
    assert isinstance(categories, dict)
    assert len(refs) == 3 * len(categories)


def test_without_data_a_benchmark_runs_on_the_sample_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert data_dir_or_sample(tmp_path) == tmp_path
    assert capsys.readouterr().err == ""
    assert data_dir_or_sample(None) == SAMPLE_DATA_DIR
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("no --data given: running on the repository's sample in data/")
    assert f"({len(_sampled()):,} jsonschemabench schemas of 6,325," in line
    assert line.endswith(
        "the figures in docs/benchmarks.md are from the full collections: --data DIR"
    )


def _options(tmp_path: Path, *, smoke: bool, data: Path | None) -> RunOptions:
    return RunOptions(smoke=smoke, docs=False, out=tmp_path, command="test", data=data)


@pytest.mark.parametrize("name", FULL_DATA)
def test_a_full_run_without_data_skips_the_full_collection_benchmarks(
    name: str, tmp_path: Path
) -> None:
    (benchmark,) = [b for b in BENCHMARKS if b.name == name]
    without = _options(tmp_path, smoke=False, data=None)
    assert skip_reason(benchmark, without) == NEEDS_DATA
    assert command_line(benchmark, without) is None
    outcome = run_benchmark(benchmark, without)
    assert (outcome.result, outcome.note) == (SKIPPED, "needs --data DIR (the full collections)")
    full = command_line(benchmark, _options(tmp_path, smoke=False, data=tmp_path))
    assert full is not None and full[-2:] == ["--data", str(tmp_path)]
    # The smoke form reads the sample, with or without --data.
    for data in (None, tmp_path):
        smoke = command_line(benchmark, _options(tmp_path, smoke=True, data=data))
        assert smoke is not None and "--data" not in smoke


def test_other_benchmarks_do_not_need_data(tmp_path: Path) -> None:
    without = _options(tmp_path, smoke=False, data=None)
    assert [b.name for b in BENCHMARKS if skip_reason(b, without) is not None] == list(FULL_DATA)


def test_the_dry_run_shows_the_data_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert benchmarks_main(["all", "--dry-run", "--only", *FULL_DATA]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown == [f"{name}: (skipped: {NEEDS_DATA})" for name in FULL_DATA]
    assert benchmarks_main(["all", "--dry-run", "--only", *FULL_DATA, "--data", str(tmp_path)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert all(line.endswith(f"--data {tmp_path}") for line in shown), shown
    missing = tmp_path / "absent"
    assert benchmarks_main(["all", "--dry-run", "--data", str(missing)]) == 2
