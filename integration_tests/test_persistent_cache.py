"""The persistent cache on real engines: kept across a restart.

One run of ``python -m benchmarks.bench_restart --smoke``, which is also that
benchmark's smoke form (so its engines start once in CI): a fresh engine
process with ``GRAMMAR_GUARD_CACHE_DIR`` pointing at an empty folder serves
a schema of bounded strings, stores its grammar and stops; then a second
fresh process, the restarted engine, must serve the schema from the folder,
which its metrics tell apart from a compile, and decode valid output on it.
Concurrent writers of one folder are covered with real processes in
``unit_tests/core/compile/test_disk_store.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from harness.oracles import assert_valid_prefix

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parent.parent
RUN_LIMIT_S = 1200
_TABLE_RULE = "| --- |"


@pytest.fixture(scope="module")
def restart(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("restart")
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_restart", "--smoke", "--out-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    report: dict[str, Any] = json.loads((out / "restart.json").read_text(encoding="utf-8"))
    report["table"] = (out / "restart.md").read_text(encoding="utf-8")
    return report


def _assert_valid(run: dict[str, Any], schema: dict[str, Any]) -> None:
    assert run["outputs"], run
    for output in run["outputs"]:
        text, finish_reason = output["text"], output["finish_reason"]
        if finish_reason == "length":
            assert_valid_prefix({"json": schema}, text, compact=True)
        else:
            assert finish_reason == "stop", output
            jsonschema.validate(json.loads(text), schema)


def test_the_first_engine_compiles_and_stores_the_grammar(restart: dict[str, Any]) -> None:
    fill = restart["restarts"]["fill"]
    _assert_valid(fill, restart["schema"])
    assert (fill["misses"], fill["writes"], fill["hits"], fill["errors"]) == (1, 1, 0, 0)


def test_the_restarted_engine_serves_the_schema_from_the_folder(restart: dict[str, Any]) -> None:
    (after,) = restart["restarts"]["runs"]["grammar-guard, cache folder"]
    _assert_valid(after, restart["schema"])
    assert (after["hits"], after["misses"], after["writes"], after["errors"]) == (1, 0, 0, 0)


def test_the_benchmark_writes_its_table(restart: dict[str, Any]) -> None:
    assert _TABLE_RULE in restart["table"], restart["table"][:2000]
