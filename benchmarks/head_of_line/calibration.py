"""The head-of-line benchmark's own rate, unless ``--rate`` is given: set by the first engine.

Half the rate at which it serves bursts of cache hits, at most the
workload's (see :func:`~benchmarks.head_of_line.workload.sustainable_rate`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from benchmarks.head_of_line.stream import served
from benchmarks.head_of_line.workload import BURST_REQUESTS, Workload, sustainable_rate

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

CALIBRATION_BURSTS = 2


@dataclasses.dataclass(frozen=True)
class Calibration:
    """How the simple stream's rate was chosen, when ``--rate`` was not given."""

    backend: str
    burst_requests: int
    served_per_s: float  # cache hits served per second, over every burst
    rate_per_s: float


async def calibrate(engine: AsyncLLM, backend: str, workload: Workload) -> Calibration:
    """The stream's rate, from bursts of cache hits on this (warm) engine.

    ``workload.rate_per_s`` is the highest it may be.
    """
    seconds = 0.0
    for burst in range(CALIBRATION_BURSTS):
        samples = await served(engine, workload.burst(), f"{backend}-burst-{burst}")
        # All were due at once: the burst took as long as its last request.
        seconds += max(sample.done_s or 0.0 for sample in samples)
    served_per_s = CALIBRATION_BURSTS * BURST_REQUESTS / seconds
    rate = sustainable_rate(served_per_s, workload.rate_per_s)
    return Calibration(backend, BURST_REQUESTS, served_per_s, rate)
