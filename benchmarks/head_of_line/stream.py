"""The head-of-line requests on one engine: each sent when due, streamed, timed as a Sample.

Each is rendered and sent as vLLM's OpenAI server would, minus HTTP; a failed request is a
sample with its error, not the end of the run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.head_of_line.workload import Arrival, Kind

if TYPE_CHECKING:
    from vllm.outputs import RequestOutput
    from vllm.v1.engine.async_llm import AsyncLLM

PROMPT = "Reply in JSON: "
ALONE, LOADED = "alone", "with slow"
BLOCKS = (ALONE, LOADED)
SIMPLE = frozenset({Kind.REPEATED.value, Kind.NEW_SMALL.value})
# Per backend, per block: every request of every round.
Results = dict[str, dict[str, list["Sample"]]]


@dataclass
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


def present(values: list[float | None]) -> list[float]:
    """The figures that were measured: a request that failed has none."""
    return [value for value in values if value is not None]


def of_kinds(samples: list[Sample], kinds: frozenset[str]) -> list[Sample]:
    return [sample for sample in samples if sample.kind in kinds]


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
    tasks = [
        asyncio.create_task(
            _send(engine, arrival, round_index, f"{name}-{index}", start + arrival.at_s)
        )
        for index, arrival in enumerate(arrivals)
    ]
    return list(await asyncio.gather(*tasks))


async def served(engine: AsyncLLM, arrivals: list[Arrival], name: str) -> list[Sample]:
    """``run_block``, failing the run if any request failed: its figures would mean nothing."""
    samples = await run_block(engine, arrivals, 0, name)
    if failed := [sample.error for sample in samples if sample.error]:
        raise RuntimeError(f"{name}: {len(failed)} requests failed, the first: {failed[0]}")
    return samples
