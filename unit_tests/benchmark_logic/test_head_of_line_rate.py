"""The head-of-line benchmark's own rate: a stream the machine it runs on can serve.

A fixed 8 requests/s was a growing queue on a slow machine even without slow
schemas; the run then measured queueing and could not test the goal.
"""

from __future__ import annotations

from benchmarks.head_of_line.workload import (
    BURST_REQUESTS,
    REPEATED_SCHEMAS,
    Kind,
    sustainable_rate,
)
from benchmarks.head_of_line.workload import FULL as WORKLOAD


def test_a_fast_engine_keeps_the_documented_rate() -> None:
    assert sustainable_rate(served_per_s=40.0, ceiling=8.0) == 8.0


def test_a_slow_engine_gets_half_what_it_served_in_plain_steps() -> None:
    assert sustainable_rate(served_per_s=9.3, ceiling=8.0) == 4.5
    assert sustainable_rate(served_per_s=10.0, ceiling=8.0) == 5.0


def test_an_engine_barely_serving_still_gets_a_stream() -> None:
    assert sustainable_rate(served_per_s=0.3, ceiling=8.0) == 0.5


def test_the_burst_is_cache_hits_due_at_once() -> None:
    burst = WORKLOAD.burst()
    assert len(burst) == BURST_REQUESTS
    assert {arrival.at_s for arrival in burst} == {0.0}
    assert {arrival.kind for arrival in burst} == {Kind.REPEATED}
    # Every schema the warm-up compiled, so the burst times serving, not compiling.
    assert [arrival.schema for arrival in burst[: len(REPEATED_SCHEMAS)]] == list(REPEATED_SCHEMAS)
    assert [arrival.max_tokens for arrival in burst] == [WORKLOAD.simple_max_tokens] * len(burst)


def test_the_burst_samples_apart_from_every_block() -> None:
    blocks = [
        WORKLOAD.schedule(round_index, with_slow=True) for round_index in range(WORKLOAD.rounds)
    ]
    block_seeds = {arrival.seed for block in blocks for arrival in block}
    burst_seeds = [arrival.seed for arrival in WORKLOAD.burst()]
    assert len(set(burst_seeds)) == len(burst_seeds)
    assert block_seeds.isdisjoint(burst_seeds)
