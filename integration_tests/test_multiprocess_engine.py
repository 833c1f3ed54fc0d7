"""The plugin on vLLM's real multi-process path (engine core in a spawned process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.oracles import assert_satisfies

from grammar_guard.demo.cases import CASES

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parents[1]


def test_every_kind_works_with_the_engine_core_in_its_own_process(tiny_model: str) -> None:
    env = {
        **os.environ,
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        # collective_rpc ships a function to the workers to read the apply hook's count.
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    }
    run = subprocess.run(
        [sys.executable, "-m", "integration_tests.multiprocess_run", tiny_model],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stderr[-6000:]
    report = json.loads(lines[-1].removeprefix("RESULT "))
    assert report["engine_client"] == "SyncMPClient"
    # The plugin's mask apply ran in the worker, a process other than this script's.
    assert report["workers"], report
    for worker_pid, apply_steps in report["workers"]:
        assert worker_pid != report["pid"] and apply_steps > 0
    by_name = {case.name: case for case in CASES}
    assert {result["case"] for result in report["results"]} == set(by_name)
    for result in report["results"]:
        assert_satisfies(
            by_name[result["case"]], result["text"], result["finish_reason"], compact=True
        )
