"""The schema coverage harness on a fixed slice of the collections (docs/coverage.md).

What a user of grammar-guard relies on, checked on real schemas and real
instances fed token by token through the plugin's compile path (routed, and
with each engine forced) and through vLLM's built-in xgrammar and guidance
paths:

- the plugin never lets an invalid instance through a grammar it compiled,
  whichever engine compiled it: it enforces a schema or refuses it;
- a schema it compiled accepts every valid instance, except for the
  limitations docs/known-limitations.md names (a schema is named there the way
  the report names it, in backticks: `test-suite/required.json#0`);
- a schema xgrammar fully enforces is served, not refused;
- routing serves every schema either engine serves alone.

The slice: test-suite files for keywords xgrammar enforces and for keywords it
does not, and two schemas of each jsonschemabench category, all quick to
compile. Reads the repository's data/ (the whole test suite, a sample of
jsonschemabench holding every file named here): a missing file is a failure.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchmarks.coverage import Coverage, CoverageConfig, Selection, run_coverage
from benchmarks.coverage.report import REPORT_FILE, SUMMARY_FILE
from benchmarks.coverage.results import (
    PATHS,
    PLUGIN_LLGUIDANCE_PATH,
    PLUGIN_PATH,
    PLUGIN_PATHS,
    PLUGIN_XGRAMMAR_PATH,
    TIMEOUT,
    SchemaResult,
)
from harness.schema_data.cases import sample_data_dir

DATA_DIR = sample_data_dir()
KNOWN_LIMITATIONS = Path(__file__).resolve().parents[1] / "docs" / "known-limitations.md"
# A schema named in known-limitations.md the way the report names it.
_LISTED_SCHEMA = re.compile(r"`((?:jsonschemabench|test-suite)/[^`#]+\.json#\d+)`")

TEST_SUITE_FILES = (
    # Keywords xgrammar enforces.
    "type.json",
    "enum.json",
    "const.json",
    "required.json",
    # Keywords it does not enforce, at least in the suite's schemas (which
    # mostly give no "type"): the plugin must refuse or enforce them.
    "maxLength.json",
    "minimum.json",
    "multipleOf.json",
    "uniqueItems.json",
    "contains.json",
    # Formats llguidance accepts some invalid values of (docs/known-limitations.md),
    # and one it enforces exactly: routing must refuse the first, serve the second.
    "optional/format/date.json",
    "optional/format/time.json",
    "optional/format/ipv4.json",
)
JSONSCHEMABENCH_FILES = (
    "BFCL_java_0.json",
    "BFCL_java_11.json",
    "BFCL_javascript_0.json",
    "BFCL_javascript_16.json",
    "BFCL_multiple_1.json",
    "BFCL_multiple_100.json",
    "BFCL_parallel_1.json",
    "BFCL_parallel_10.json",
    "BFCL_parallel_multiple_0.json",
    "BFCL_parallel_multiple_1.json",
    "BFCL_simple_1.json",
    "BFCL_simple_100.json",
    "BFCL_sql_2.json",
    "BFCL_sql_13.json",
    "Github_easy---o10008.json",
    "Github_easy---o10012.json",
    # Upgradable: routed to llguidance for xgrammar's compile time alone, so
    # its first request records its path through a wrapper around the matcher.
    "Github_easy---o9811.json",
    "Github_trivial---o10021.json",
    "Github_trivial---o10026.json",
    "Glaiveai2K---analyze_health_data_4ad104b4.json",
    "Glaiveai2K---analyze_social_media_sentiment_b20b116b.json",
    "Handwritten---dep7.json",
    "Handwritten---pnmp2.json",
    "JME_0.json",
    "JME_10.json",
    "Snowplow---sp_102_Normalized.json",
    "Snowplow---sp_103_Normalized.json",
    "Synthesized---draft2019_09_nonvalid_additionalItems_id8_subschema1_not_2.json",
    "Synthesized---draft2019_09_nonvalid_additionalProperties_id1_subschema1_not_2.json",
    "WashingtonPost---wp_101_Normalized.json",
    "WashingtonPost---wp_102_Normalized.json",
)


@pytest.fixture(scope="module")
def coverage(tmp_path_factory: pytest.TempPathFactory) -> Coverage:
    config = CoverageConfig(
        data_dir=DATA_DIR,
        selection=Selection(files=TEST_SUITE_FILES + JSONSCHEMABENCH_FILES),
        out_dir=tmp_path_factory.mktemp("coverage"),
    )
    return run_coverage(config)


def _listed_in_known_limitations() -> set[str]:
    if not KNOWN_LIMITATIONS.is_file():
        return set()
    return set(_LISTED_SCHEMA.findall(KNOWN_LIMITATIONS.read_text(encoding="utf-8")))


def _wrong(result: SchemaResult, path: str, *, valid: bool) -> list[str]:
    outcome = result.paths[path]
    return [
        f"{result.ref.name} test {wrong.test_index} ({wrong.test_description}): {wrong.text}"
        for wrong in outcome.wrong
        if wrong.valid is valid
    ]


def _written(coverage: Coverage, name: str) -> Path:
    (written,) = [path for path in coverage.files if path.name == name]
    return written


def test_the_report_holds_every_selected_schema_on_every_path(coverage: Coverage) -> None:
    files = {result.ref.file for result in coverage.results}
    assert files == set(TEST_SUITE_FILES + JSONSCHEMABENCH_FILES)
    assert all(set(result.paths) == set(PATHS) for result in coverage.results)
    written = json.loads(_written(coverage, REPORT_FILE).read_text())
    for path in PATHS:
        assert written["overall"][path]["schemas"] == len(coverage.results)


def test_the_report_names_all_five_paths(coverage: Coverage) -> None:
    five = [
        "grammar-guard",
        "grammar-guard-xgrammar",
        "grammar-guard-llguidance",
        "vllm-xgrammar",
        "vllm-guidance",
    ]
    assert list(PATHS) == five
    assert json.loads(_written(coverage, REPORT_FILE).read_text())["paths"] == five
    summary = _written(coverage, SUMMARY_FILE).read_text(encoding="utf-8")
    overall = summary.split("## Overall", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in overall.splitlines()[4:]]
    assert rows[: len(five)] == five


@pytest.mark.parametrize("path", PLUGIN_PATHS)
def test_the_plugin_accepts_no_invalid_instance_outside_refusals(
    coverage: Coverage, path: str
) -> None:
    accepted = [line for result in coverage.results for line in _wrong(result, path, valid=False)]
    assert not accepted, f"{path}: invalid instances accepted:\n" + "\n".join(accepted)


def test_routing_compiles_every_schema_either_engine_compiles(coverage: Coverage) -> None:
    # Routing picks, per schema, an engine that enforces all of it: a schema
    # one engine alone serves must be served. Only a routed compile that ran
    # past the harness's timeout is excused (on a busy machine it may).
    missed = [
        f"{result.ref.name}: {result.paths[PLUGIN_PATH].outcome} "
        f"({result.paths[PLUGIN_PATH].detail}), compiled by {', '.join(forced)}"
        for result in coverage.results
        if (forced := _forced_paths_that_compiled(result))
        and not result.paths[PLUGIN_PATH].compiled
        and result.paths[PLUGIN_PATH].outcome != TIMEOUT
    ]
    assert not missed, (
        "schemas a forced engine compiles but routing does not (a timeout would be excused; "
        "these are not timeouts):\n" + "\n".join(missed)
    )


def _forced_paths_that_compiled(result: SchemaResult) -> list[str]:
    forced = (PLUGIN_XGRAMMAR_PATH, PLUGIN_LLGUIDANCE_PATH)
    return [path for path in forced if result.paths[path].compiled]


def test_every_schema_a_plugin_path_compiles_names_its_engine(coverage: Coverage) -> None:
    # The report's "served by" column: an upgradable key once counted under no engine.
    unnamed = [
        f"{result.ref.name} on {path}"
        for result in coverage.results
        for path in PLUGIN_PATHS
        if result.paths[path].outcome == "compiled" and result.paths[path].engine is None
    ]
    assert unnamed == []
    (upgradable,) = [r for r in coverage.results if r.ref.file == "Github_easy---o9811.json"]
    assert upgradable.paths[PLUGIN_PATH].engine == "llguidance"


def test_a_schema_the_plugin_compiles_accepts_its_valid_instances(coverage: Coverage) -> None:
    excused = _listed_in_known_limitations()
    rejected = [
        line
        for result in coverage.results
        if result.ref.name not in excused
        for line in _wrong(result, PLUGIN_PATH, valid=True)
    ]
    assert not rejected, "valid instances rejected:\n" + "\n".join(rejected)


def test_schemas_of_type_alone_are_always_served(coverage: Coverage) -> None:
    # xgrammar enforces ``type`` fully: refusing such a schema would be a false alarm.
    refused = [
        f"{result.ref.name}: {result.paths[PLUGIN_PATH].outcome}"
        for result in coverage.results
        if result.ref.file == "type.json" and not result.paths[PLUGIN_PATH].compiled
    ]
    assert not refused
