"""The load soak in its short CI form: nothing lost, no restart, memory flat past the cache bound.

One run of ``benchmarks/load_soak.py`` against its own server: 8000
requests, 150 at once, a fifth of them bad, half of the good ones with a
schema never seen before (about 200 KiB compiled each), and a 4 MiB compile
cache, so the cache is full within seconds and evicts for the rest of the
run. The engine's RSS climbs to a high-water mark over the first few
thousand requests, which is why memory is judged on the last 2000, after a
warm-up of 6000 (``memory_trend``). The full soak is ``python -m
benchmarks.load_soak``; docs/reliability.md has its figures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from benchmarks.load_soak import SoakConfig, SoakResult, run_soak

from integration_tests.bad_input_corpus import SERVER_ARGS
from integration_tests.server import start_api_server

pytestmark = pytest.mark.engine

CONFIG = SoakConfig(
    requests=2000, warmup_requests=6000, concurrency=150, max_duration_s=600.0, cache_mb=4.0
)


@pytest.fixture(scope="module")
def soak(tiny_model: str) -> Iterator[SoakResult]:
    with start_api_server(tiny_model, *SERVER_ARGS, env=CONFIG.server_env()) as server:
        yield run_soak(server, CONFIG)


def test_every_request_got_its_answer(soak: SoakResult) -> None:
    assert soak.lost == 0, soak.failure_examples
    assert soak.wrong == 0, soak.failure_examples


def test_every_kind_of_request_was_served(soak: SoakResult) -> None:
    for kind in ("hot", "new", "bad"):
        assert soak.ended.get(f"{kind}:ok", 0) > 0, soak.ended


def test_the_engine_never_restarted(soak: SoakResult) -> None:
    assert soak.engine_pid_after == soak.engine_pid_before
    assert soak.healthy_after
    assert soak.restarts == 0


def test_memory_is_flat_once_the_cache_bound_is_reached(soak: SoakResult) -> None:
    assert soak.memory.bound_reached_s is not None, "the cache never evicted"
    assert soak.memory.measured_from_s is not None, "the warm-up took the whole run"
    assert soak.memory.flat, soak.memory
