"""The first request of each kind, right after start, with every core busy decoding.

What a new user meets: default settings (no ``GRAMMAR_GUARD_*`` variable),
an engine that has just reported ready and is decoding long unconstrained
requests, and a first request of every kind, each a key never compiled.
Nothing is warmed up and nothing waits for the compile workers: that is the
point. Each constrained request is paired with an unconstrained twin sent
with it, and its grammar may cost it at most its own compile time (timed in
this process under the same load) plus ``OVERHEAD_BOUND_S``.

Two engines, each from nothing: the OpenAI-compatible server, and
``LLM(...)`` with its engine core in a spawned process, run as
``python -m benchmarks.first_request --offline`` in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks.first_request import (
    KINDS,
    FirstRequestResult,
    Timing,
    build_reference_engine,
    measure_first_requests,
)
from harness.oracles import assert_satisfies
from harness.server import GRAMMAR_GUARD_FLAGS, start_api_server

from grammar_guard.core.settings import ENV_PREFIX

pytestmark = pytest.mark.engine

REPO = Path(__file__).resolve().parent.parent
# What a grammar that compiles in milliseconds may add to its request's
# first token, beyond its compile: the requirement the product makes.
OVERHEAD_BOUND_S = 0.1
DECODE_STREAMS = 16
# Below this the decode load did not keep the machine busy, and the test
# would not be testing what it says.
BUSY_PERCENT = 75.0
OFFLINE_RUN_LIMIT_S = 900


def _default_environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIX)}


@pytest.fixture(scope="module")
def on_the_server(tiny_model: str) -> Iterator[FirstRequestResult]:
    engine = build_reference_engine(tiny_model)
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(_default_environment()):
            patch.delenv(name)
        with start_api_server(tiny_model, *GRAMMAR_GUARD_FLAGS) as server:
            yield measure_first_requests(server, engine, rounds=1, load=DECODE_STREAMS)


@pytest.fixture(scope="module")
def through_llm(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> FirstRequestResult:
    output = tmp_path_factory.mktemp("first-request") / "offline.json"
    command = [sys.executable, "-m", "benchmarks.first_request", "--offline", "--rounds", "1"]
    command += ["--load", str(DECODE_STREAMS), "--json", str(output)]
    environment = {**_default_environment(), "GRAMMAR_GUARD_TINY_MODEL_DIR": tiny_model}
    run = subprocess.run(
        command,
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=OFFLINE_RUN_LIMIT_S,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    data = json.loads(output.read_text())
    return FirstRequestResult(
        timings=[Timing(**timing) for timing in data["timings"]],
        cpu_percent=data["cpu_percent"],
    )


@pytest.fixture(params=["server", "LLM"])
def result(
    request: pytest.FixtureRequest,
) -> FirstRequestResult:
    fixture = "on_the_server" if request.param == "server" else "through_llm"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


def test_every_kind_got_its_first_request(result: FirstRequestResult) -> None:
    assert sorted(timing.kind for timing in result.timings) == sorted(case.name for case in KINDS)


def test_every_core_was_busy_decoding(result: FirstRequestResult) -> None:
    assert result.cpu_percent >= BUSY_PERCENT


def test_each_first_output_satisfies_its_grammar(result: FirstRequestResult) -> None:
    cases = {case.name: case for case in KINDS}
    for timing in result.timings:
        assert_satisfies(cases[timing.kind], timing.text, timing.finish_reason, compact=True)


def test_a_grammar_costs_its_first_request_no_more_than_its_compile_plus_100_ms(
    result: FirstRequestResult,
) -> None:
    slow = [
        f"{timing.kind}: +{timing.overhead_s * 1e3:.0f} ms over its twin, "
        f"compile {timing.compile_s * 1e3:.1f} ms"
        for timing in result.timings
        if timing.overhead_s > timing.compile_s + OVERHEAD_BOUND_S
    ]
    assert not slow, slow
