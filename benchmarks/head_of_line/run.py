"""The head-of-line run: each backend's engine in turn, blocks alternating; the stream's rate.

Each request is rendered and sent when due, as vLLM's OpenAI server would, minus HTTP, streamed
and timed as a Sample; a failed request is a sample with its error, not the end of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from benchmarks.head_of_line.workload import BLOCKS, LOADED, Arrival, Workload, sustainable_rate
from benchmarks.scoped_env import CLOSED_OBJECTS, scoped_environment

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from vllm.outputs import RequestOutput
    from vllm.v1.engine.async_llm import AsyncLLM

BACKENDS = ("xgrammar", "guidance", "grammar-guard", "grammar-guard-xgrammar")
# Configurations of one vLLM backend, by the name they are reported under:
# the backend, and the settings its engine starts with.
_CONFIGURATIONS: dict[str, tuple[str, dict[str, str]]] = {
    name: ("grammar-guard", {"GRAMMAR_GUARD_ENGINE": engine, **CLOSED_OBJECTS})
    for name, engine in (("grammar-guard", "auto"), ("grammar-guard-xgrammar", "xgrammar"))
}
CALIBRATION_BURSTS = 2
PROMPT = "Reply in JSON: "
# Per backend, per block: every request of every round.
Results = dict[str, dict[str, list["Sample"]]]


@dataclasses.dataclass
class Sample:
    """One request as the client saw it, with vLLM's engine-side timestamps."""

    kind: str
    round: int
    at_s: float  # due time from the start of its block
    send_lag_s: float  # how late the client sent it (event-loop delay)
    ttft_s: float | None = None  # from due time to the first token; None: none came
    wait_s: float | None = None  # engine: queued until first scheduled (grammar included)
    step_s: float | None = None  # engine: first scheduled until its first token
    output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None
    done_s: float | None = None  # from due time to its last output; None: it failed

    @property
    def other_s(self) -> float | None:
        """The rest of the TTFT: the API process, the hops to the engine and back, send lag."""
        if self.ttft_s is None or self.wait_s is None or self.step_s is None:
            return None
        return self.ttft_s - self.wait_s - self.step_s


@dataclasses.dataclass(frozen=True)
class Calibration:
    """How the simple stream's rate was chosen, when ``--rate`` was not given."""

    backend: str
    burst_requests: int
    served_per_s: float  # cache hits served per second, over every burst
    rate_per_s: float


def _sampling_params(arrival: Arrival) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    return SamplingParams(
        max_tokens=arrival.max_tokens,
        temperature=1.0,
        seed=arrival.seed,
        output_kind=RequestOutputKind.DELTA,  # streamed, as a server sends it
        structured_outputs=StructuredOutputsParams(json=arrival.schema),
    )


def _engine_split(output: RequestOutput) -> tuple[float | None, float | None]:
    """(queued until scheduled, scheduled until first token), from the engine core's clock."""
    stats = output.metrics
    if stats is None or not stats.scheduled_ts or not stats.first_token_ts:
        return None, None
    return stats.scheduled_ts - stats.queued_ts, stats.first_token_ts - stats.scheduled_ts


def _describe(exc: BaseException) -> str:
    # vLLM wraps engine-side failures (EngineGenerateError has no text): name the causes too.
    chain = [exc]
    while (cause := chain[-1].__cause__) is not None:
        chain.append(cause)
    return " <- ".join(f"{type(error).__name__}: {error}" for error in chain)


async def _render(engine: AsyncLLM) -> Any:
    """The prompt as the OpenAI server renders one, in the API process, per request."""
    from vllm.renderers.inputs.preprocess import parse_model_prompt

    parsed = parse_model_prompt(engine.model_config, PROMPT)
    (engine_input,) = await engine.renderer.render_cmpl_async([parsed])
    return engine_input


async def _send(
    engine: AsyncLLM, arrival: Arrival, round_index: int, request_id: str, due: float
) -> Sample:
    await asyncio.sleep(max(0.0, due - time.perf_counter()))
    sample = Sample(
        arrival.kind.value, round_index, arrival.at_s, send_lag_s=time.perf_counter() - due
    )
    try:
        prompt = await _render(engine)
        async for output in engine.generate(prompt, _sampling_params(arrival), request_id):
            completion = output.outputs[0]
            if completion.token_ids and sample.ttft_s is None:
                sample.ttft_s = time.perf_counter() - due
                sample.wait_s, sample.step_s = _engine_split(output)
            sample.output_tokens += len(completion.token_ids)
            sample.finish_reason = completion.finish_reason
        sample.done_s = time.perf_counter() - due
    except Exception as exc:  # a failed request is a result, not the end of the run
        sample.error = _describe(exc)
    return sample


async def run_block(
    engine: AsyncLLM, arrivals: list[Arrival], round_index: int, name: str
) -> list[Sample]:
    """Send ``arrivals`` on time, each in its own task, and wait until all have finished."""
    start = time.perf_counter() + 0.5  # room to create the tasks before the first is due
    sends = [
        _send(engine, arrival, round_index, f"{name}-{index}", start + arrival.at_s)
        for index, arrival in enumerate(arrivals)
    ]
    return list(await asyncio.gather(*sends))


async def served(engine: AsyncLLM, arrivals: list[Arrival], name: str) -> list[Sample]:
    """``run_block``, failing the run if any request failed: its figures would mean nothing."""
    samples = await run_block(engine, arrivals, 0, name)
    if failed := [sample.error for sample in samples if sample.error]:
        raise RuntimeError(f"{name}: {len(failed)} requests failed, the first: {failed[0]}")
    return samples


async def calibrate(engine: AsyncLLM, backend: str, workload: Workload) -> Calibration:
    """The stream's rate, at most ``workload.rate_per_s``, from bursts of cache hits on this
    (warm) engine."""
    burst, seconds = workload.burst(), 0.0
    for index in range(CALIBRATION_BURSTS):
        samples = await served(engine, burst, f"{backend}-burst-{index}")
        # All were due at once: the burst took as long as its last request.
        seconds += max(sample.done_s or 0.0 for sample in samples)
    served_per_s = CALIBRATION_BURSTS * len(burst) / seconds
    rate = sustainable_rate(served_per_s, workload.rate_per_s)
    return Calibration(backend, len(burst), served_per_s, rate)


@contextlib.asynccontextmanager
async def started_engine(backend: str) -> AsyncIterator[AsyncLLM]:
    """``backend``'s engine, with its settings in force while it runs; shut down after."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from grammar_guard.demo.engine import ENGINE_KWARGS
    from grammar_guard.demo.tiny_model import build_tiny_model

    vllm_backend, settings = _CONFIGURATIONS.get(backend, (backend, {}))
    # The engine-core process reads them when it starts, the API side (this
    # process) for each request.
    with scoped_environment(settings):
        arguments = AsyncEngineArgs(
            model=str(build_tiny_model()),
            structured_outputs_config={"backend": vllm_backend, "disable_any_whitespace": True},
            disable_log_stats=False,  # per-request timestamps, for the wait/step split
            **ENGINE_KWARGS,
        )
        engine = AsyncLLM.from_engine_args(arguments)
        try:
            yield engine
        finally:
            engine.shutdown()


async def _measure(engine: AsyncLLM, backend: str, workload: Workload) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {block: [] for block in BLOCKS}
    for round_index in range(workload.rounds):
        # Alternating, so neither block always follows engine start-up or the other.
        for block in BLOCKS if round_index % 2 == 0 else BLOCKS[::-1]:
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
