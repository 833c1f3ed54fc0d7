"""The load soak in its short CI form: nothing lost, no restart, memory flat past the cache bound.

One run of ``benchmarks/load_soak.py`` against its own server, 150 requests
at once, a fifth of them bad, half of the good ones with a schema never seen
before (100 to 200 KiB compiled each), and a 4 MiB compile cache, so the cache
is full within seconds and evicts for the rest of the run. The engine's RSS
climbs to a high-water mark over the first several thousand requests, a
number that varies with the machine, so the run goes on until RSS has held
level over the last 2000 (``memory_trend``), or fails at 20000 requests or
10 minutes. The full soak is ``python -m benchmarks.load_soak``;
docs/reliability.md has its figures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from benchmarks.load_soak import SoakConfig, SoakResult, run_soak
from harness.bad_input.case import SERVER_ARGS
from harness.server import start_api_server

pytestmark = pytest.mark.engine

CONFIG = SoakConfig(
    requests=2000, max_requests=20000, concurrency=150, max_duration_s=600.0, cache_mb=4.0
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
    # RSS every ten seconds, by requests answered: what a failure needs explained.
    outline = [(sample.answered, round(sample.rss_mib)) for sample in soak.samples[::20]]
    assert soak.memory.flat, (soak.stopped_by, soak.memory, outline)
