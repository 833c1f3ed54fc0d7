"""The persistent cache on real engines: shared by two processes, and kept across a restart.

Each engine is a fresh interpreter running :func:`serve` (an in-process
engine core), with ``GRAMMAR_GUARD_CACHE_DIR`` pointing at one folder. Both
start together, since an engine start is the slow part here. The first
serves a schema with two long bounded strings (seconds to compile), stores
it and stops; then the second, the restarted engine, must serve it from the
folder, which its metrics tell apart from a compile. Concurrent writers of
one folder are covered with real processes in ``unit_tests/core/test_disk_store.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from harness.oracles import assert_valid_prefix

from grammar_guard.core.disk_store import stored_files
from grammar_guard.demo.engine import ENGINE_ENV

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parent.parent
ENGINE_LIMIT_S = 900
RESULT = "RESULT "
# Seconds to compile here, more with two engines starting on two cores.
SLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 300},
        "summary": {"type": "string", "maxLength": 301},
    },
    "required": ["title", "summary"],
}


def serve(model: str, schema_json: str, seed: int, *, on_cue: bool) -> None:
    """In an engine process: answer one request for the schema, report output and metrics.

    With ``on_cue``, the request waits for a line on stdin once the engine is up.
    """
    import grammar_guard
    from grammar_guard.demo.engine import start_engine

    llm = start_engine(model)
    if on_cue:
        sys.stdin.readline()
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = SamplingParams(
        max_tokens=24,
        temperature=1.0,
        seed=seed,
        structured_outputs=StructuredOutputsParams(json=json.loads(schema_json)),
    )
    output = llm.generate(["Write it: "], [params], use_tqdm=False)[0].outputs[0]
    core = llm.llm_engine.engine_core.engine_core
    # The file is written after the request got its grammar: let it land.
    assert core.structured_output_manager.backend.service.drain(ENGINE_LIMIT_S)
    numbers = grammar_guard.metrics_snapshot().as_dict()
    report = {"text": output.text, "finish_reason": output.finish_reason, "metrics": numbers}
    print(RESULT + json.dumps(report), flush=True)


def _start(model: str, folder: Path, seed: int, *, on_cue: bool) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        **ENGINE_ENV,
        "GRAMMAR_GUARD_CACHE_DIR": str(folder),
        # Far above any compile here: this test is about the folder, not timeouts.
        "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(ENGINE_LIMIT_S),
        # The folder matters for grammars that are slow to compile: xgrammar's.
        # Routed, this schema would go to llguidance and compile in a millisecond.
        "GRAMMAR_GUARD_ENGINE": "xgrammar",
    }
    code = (
        "from integration_tests.test_persistent_cache import serve; "
        f"serve({model!r}, {json.dumps(SLOW_SCHEMA)!r}, {seed}, on_cue={on_cue})"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _report(process: subprocess.Popen[str], cue: str = "") -> dict[str, Any]:
    output, _ = process.communicate(cue, timeout=ENGINE_LIMIT_S)
    results = [line for line in output.splitlines() if line.startswith(RESULT)]
    assert process.returncode == 0 and results, f"engine process failed:\n{output[-6000:]}"
    return dict(json.loads(results[-1].removeprefix(RESULT)))


def _assert_valid(report: dict[str, Any]) -> None:
    text, finish_reason = report["text"], report["finish_reason"]
    if finish_reason == "length":
        assert_valid_prefix({"json": SLOW_SCHEMA}, text, compact=True)
    else:
        assert finish_reason == "stop", report
        jsonschema.validate(json.loads(text), SLOW_SCHEMA)


def _count(report: dict[str, Any], name: str) -> float:
    return float(report["metrics"][f"grammar_guard_{name}_total"])


def test_an_engine_restarted_on_a_shared_folder_serves_a_slow_schema_from_it(
    tiny_model: str, tmp_path: Path
) -> None:
    folder = tmp_path / "grammars"
    first = _start(tiny_model, folder, seed=1, on_cue=False)
    restarted = _start(tiny_model, folder, seed=2, on_cue=True)

    before = _report(first)
    _assert_valid(before)
    assert _count(before, "disk_misses") == 1 and _count(before, "disk_writes") == 1
    files = stored_files(folder)
    assert len(files) == 1 and files[0].header is not None  # one key, one whole file

    after = _report(restarted, cue="go\n")  # the first engine has stopped
    _assert_valid(after)
    assert _count(after, "disk_hits") == 1
    assert _count(after, "disk_misses") == 0 and _count(after, "disk_writes") == 0
    assert _count(before, "disk_errors") == _count(after, "disk_errors") == 0
