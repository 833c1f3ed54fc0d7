"""The plugin on vLLM's real multi-process path (engine core in a spawned process).

The engine is ``spawned_engine`` (``conftest.py``), shared with the
first-request check, which runs on it first.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness.oracles import assert_satisfies

from grammar_guard.demo.cases import CASES

pytestmark = pytest.mark.engine


def test_every_kind_works_with_the_engine_core_in_its_own_process(
    spawned_engine: dict[str, Any],
) -> None:
    report = spawned_engine["multiprocess"]
    assert report["engine_client"] == "SyncMPClient"
    # The plugin's mask apply ran in the worker, a process other than the script's.
    assert report["workers"], report
    for worker_pid, apply_steps in report["workers"]:
        assert worker_pid != report["pid"] and apply_steps > 0
    by_name = {case.name: case for case in CASES}
    assert {result["case"] for result in report["results"]} == set(by_name)
    for result in report["results"]:
        assert_satisfies(
            by_name[result["case"]], result["text"], result["finish_reason"], compact=True
        )
