"""The head-of-line run: each backend's engine in turn, blocks alternating; the stream's rate."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any

from benchmarks.head_of_line.stream import BLOCKS, LOADED, Results, Sample, run_block, served
from benchmarks.head_of_line.workload import BURST_REQUESTS, Workload, sustainable_rate
from benchmarks.scoped_env import CLOSED_OBJECTS, scoped_environment

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from vllm.v1.engine.async_llm import AsyncLLM

BACKENDS = ("xgrammar", "guidance", "grammar-guard", "grammar-guard-xgrammar")
# Configurations of one vLLM backend, by the name they are reported under:
# the backend, and the settings its engine starts with.
_CONFIGURATIONS: dict[str, tuple[str, dict[str, str]]] = {
    name: ("grammar-guard", {"GRAMMAR_GUARD_ENGINE": engine, **CLOSED_OBJECTS})
    for name, engine in (("grammar-guard", "auto"), ("grammar-guard-xgrammar", "xgrammar"))
}
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


def _engine_args(backend: str) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    from grammar_guard.demo.engine import ENGINE_KWARGS
    from grammar_guard.demo.tiny_model import build_tiny_model

    return AsyncEngineArgs(
        model=str(build_tiny_model()),
        structured_outputs_config={"backend": backend, "disable_any_whitespace": True},
        disable_log_stats=False,  # per-request timestamps, for the wait/step split
        **ENGINE_KWARGS,
    )


def _block_order(round_index: int) -> tuple[str, ...]:
    # Alternating, so neither block always follows engine start-up or the other.
    return BLOCKS if round_index % 2 == 0 else BLOCKS[::-1]


@contextlib.asynccontextmanager
async def started_engine(backend: str) -> AsyncIterator[AsyncLLM]:
    """``backend``'s engine, with its settings in force while it runs; shut down after."""
    from vllm.v1.engine.async_llm import AsyncLLM

    vllm_backend, settings = _CONFIGURATIONS.get(backend, (backend, {}))
    # The engine-core process reads them when it starts, the API side (this
    # process) for each request.
    with scoped_environment(settings):
        engine = AsyncLLM.from_engine_args(_engine_args(vllm_backend))
        try:
            yield engine
        finally:
            engine.shutdown()


async def _measure(engine: AsyncLLM, backend: str, workload: Workload) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {block: [] for block in BLOCKS}
    for round_index in range(workload.rounds):
        for block in _block_order(round_index):
            arrivals = workload.schedule(round_index, with_slow=block == LOADED)
            name = f"{backend}-{round_index}-{block.replace(' ', '-')}"
            samples[block] += await run_block(engine, arrivals, round_index, name)
    return samples


async def run(
    backends: list[str], workload: Workload, *, calibrate_rate: bool
) -> tuple[Results, Workload, Calibration | None]:
    """Every backend in turn; with ``calibrate_rate``, the first sets the stream's rate."""
    import grammar_guard

    grammar_guard.register()  # the engine arguments name the backend before plugins load
    results: Results = {}
    calibration = None
    for backend in backends:
        async with started_engine(backend) as engine:
            await served(engine, workload.warm_up(), f"{backend}-warm-up")
            if calibrate_rate and calibration is None:
                calibration = await calibrate(engine, backend, workload)
                workload = dataclasses.replace(workload, rate_per_s=calibration.rate_per_s)
            results[backend] = await _measure(engine, backend, workload)
    return results, workload, calibration
