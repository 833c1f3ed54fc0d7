"""Head-of-line blocking: do slow grammar compiles delay everyone else's first token?

A steady Poisson stream of simple structured requests (mostly a few repeated
small schemas, some new small ones) runs in blocks, alone and with a request
every few seconds whose schema is new and slow to compile (strings with a
large ``maxLength``). The figure of merit is the simple requests' time to
first token (TTFT), p50 and p99, and how much the slow schemas move it.

Every configuration runs in this one script, one engine after the other, on
the tiny model (``grammar_guard.demo``) with compact JSON: vLLM's built-in
``xgrammar`` and ``guidance`` backends, ``grammar-guard`` routing each schema
to its engine (the default), and ``grammar-guard-xgrammar``, grammar-guard
with xgrammar forced (``GRAMMAR_GUARD_ENGINE=xgrammar``). Each engine is an
``AsyncLLM`` with its engine core in a process of its own: what vLLM's OpenAI
server drives, minus HTTP. Requests
stream (``DELTA`` outputs); a request's TTFT runs from the moment it was due
to the first output carrying a token, and vLLM's per-request timestamps split
it into the wait until the request was first scheduled (its grammar
included), the step that produced the token, and the rest (the API process
and the hops between processes).

Each engine runs ``rounds`` rounds of two blocks, alone and with slow
schemas, in alternating order, so a machine whose load drifts weighs on both
alike. A block ends once all its requests have finished, slow ones included,
so no compile spills into the next block.

Unless ``--rate`` is given, the simple stream's rate is set once, on the
first engine, from how fast it serves bursts of cache hits: half that, and
at most 8 requests/s. A fixed rate that one machine serves easily is a
queue that grows without any slow request on a slower one, and such a run
measures queueing, not blocking.

    .venv/bin/python benchmarks/bench_head_of_line.py [--quick] [--env NAME=VALUE ...]
        [--backends NAME ...] [--block S] [--json PATH] [--plot PATH] [--markdown PATH]

Prints markdown tables, writes every sample to a JSON file and plots
``docs/img/head_of_line.png`` (where matplotlib is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import time
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from head_of_line_report import (
    BLOCKS,
    LOADED,
    Results,
    Sample,
    breakdown_table,
    goal_line,
    headline_table,
    plot,
    summaries,
)
from head_of_line_workload import BURST_REQUESTS, Arrival, Workload, sustainable_rate
from scoped_env import scoped_environment

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from vllm.outputs import RequestOutput
    from vllm.v1.engine.async_llm import AsyncLLM

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("xgrammar", "guidance", "grammar-guard", "grammar-guard-xgrammar")
# Configurations of one vLLM backend, by the name they are reported under:
# the backend, and the settings its engine starts with.
_CONFIGURATIONS: dict[str, tuple[str, dict[str, str]]] = {
    "grammar-guard": ("grammar-guard", {"GRAMMAR_GUARD_ENGINE": "auto"}),
    "grammar-guard-xgrammar": ("grammar-guard", {"GRAMMAR_GUARD_ENGINE": "xgrammar"}),
}
DEFAULT_PLOT = REPO / "docs" / "img" / "head_of_line.png"
DEFAULT_JSON = REPO / "build" / "head_of_line.json"
PROMPT = "Reply in JSON: "

# A slow schema every 7.5 s, alternately one and two new long strings: about
# 2.5 s and 5 s of compile each on an idle 2-core machine, so vLLM's single
# grammar thread is busy about half of a loaded block and keeps up.
FULL = Workload(
    block_s=30.0,
    rounds=2,
    rate_per_s=8.0,
    new_small_share=0.1,
    slow_every_s=7.5,
    slow_strings=(1, 2),
    slow_max_length=300,
)
QUICK = dataclasses.replace(FULL, block_s=15.0, rounds=1)
CALIBRATION_BURSTS = 2


# --- one request, one block ---


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


# --- one engine ---


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


@dataclasses.dataclass(frozen=True)
class Calibration:
    """How the simple stream's rate was chosen, when ``--rate`` was not given."""

    backend: str
    burst_requests: int
    served_per_s: float  # cache hits served per second, over every burst
    rate_per_s: float


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


async def _served(engine: AsyncLLM, arrivals: list[Arrival], name: str) -> list[Sample]:
    """``run_block``, failing the run if any request failed: its figures would mean nothing."""
    samples = await run_block(engine, arrivals, 0, name)
    if failed := [sample.error for sample in samples if sample.error]:
        raise RuntimeError(f"{name}: {len(failed)} requests failed, the first: {failed[0]}")
    return samples


async def calibrate(engine: AsyncLLM, backend: str, workload: Workload) -> Calibration:
    """The stream's rate, from bursts of cache hits on this (warm) engine.

    ``workload.rate_per_s`` is the highest it may be.
    """
    seconds = 0.0
    for burst in range(CALIBRATION_BURSTS):
        samples = await _served(engine, workload.burst(), f"{backend}-burst-{burst}")
        # All were due at once: the burst took as long as its last request.
        seconds += max(sample.done_s or 0.0 for sample in samples)
    served = CALIBRATION_BURSTS * BURST_REQUESTS / seconds
    rate = sustainable_rate(served, workload.rate_per_s)
    return Calibration(backend, BURST_REQUESTS, served, rate)


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
            await _served(engine, workload.warm_up(), f"{backend}-warm-up")
            if calibrate_rate and calibration is None:
                calibration = await calibrate(engine, backend, workload)
                workload = dataclasses.replace(workload, rate_per_s=calibration.rate_per_s)
            results[backend] = await _measure(engine, backend, workload)
    return results, workload, calibration


# --- the command line ---


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise SystemExit(f"--env takes NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def _apply_env(extra: dict[str, str]) -> None:
    """The engines' settings; the engine-core processes inherit them when they start."""
    from grammar_guard.demo.engine import ENGINE_ENV

    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the engine core in its own process
    os.environ.update(extra)


def _workload(args: argparse.Namespace) -> Workload:
    workload = QUICK if args.quick else FULL
    overrides = {
        "block_s": args.block,
        "rounds": args.rounds,
        "rate_per_s": args.rate,
        "slow_every_s": args.slow_every,
    }
    return dataclasses.replace(
        workload, **{name: value for name, value in overrides.items() if value is not None}
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 15 s blocks")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--block", type=float, help="seconds per block")
    parser.add_argument("--rounds", type=int, help="rounds of an alone and a loaded block")
    parser.add_argument(
        "--rate",
        type=float,
        help="simple requests per second (default: half what the first engine serves, at most 8)",
    )
    parser.add_argument("--slow-every", type=float, help="seconds between slow requests")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set for the engines (GRAMMAR_GUARD_COMPILE_WORKERS=4, say); repeatable",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="every sample")
    parser.add_argument("--plot", type=Path, default=DEFAULT_PLOT)
    parser.add_argument("--markdown", type=Path, help="also write the headline table here")
    return parser


def _report(
    workload: Workload,
    calibration: Calibration | None,
    env: dict[str, str],
    results: Results,
    started: float,
    load: Any,
) -> dict[str, Any]:
    return {
        "date": date.today().isoformat(),
        "seconds": time.perf_counter() - started,
        "cpus": os.cpu_count(),
        # Other work on the machine shows here; the figures are only as quiet as it was.
        "load_average": {"before": load, "after": os.getloadavg()},
        "workload": dataclasses.asdict(workload),
        "calibration": None if calibration is None else dataclasses.asdict(calibration),
        "env": env,
        "summary": summaries(results),
        "samples": {
            backend: {
                block: [dataclasses.asdict(sample) for sample in samples]
                for block, samples in blocks.items()
            }
            for backend, blocks in results.items()
        },
    }


def _caption(workload: Workload, report: dict[str, Any]) -> str:
    load = report["load_average"]
    return (
        f"Tiny model, {workload.rounds} x {workload.block_s:g} s per block, "
        f"{workload.rate_per_s:g} simple requests/s{_rate_source(report['calibration'])}, "
        f"a slow schema every {workload.slow_every_s:g} s, {report['date']}, load average "
        f"{load['before'][0]:.1f} before, {load['after'][0]:.1f} after"
    )


def _rate_source(calibration: dict[str, Any] | None) -> str:
    if calibration is None:
        return ""
    return (
        f" (set by the run: {calibration['backend']} served bursts of "
        f"{calibration['burst_requests']} cache hits at "
        f"{calibration['served_per_s']:.1f} requests/s)"
    )


def _markdown(workload: Workload, report: dict[str, Any]) -> str:
    """What docs/benchmarks.md shows: the headline table and the slow requests' own wait."""
    slow = ", ".join(
        f"{backend} {row['slow']['ttft_p50_s']:.3g} s" for backend, row in report["summary"].items()
    )
    headline = headline_table(report["summary"])
    text = f"{_caption(workload, report)}.\n\n{headline}\n\nSlow requests' TTFT p50: {slow}.\n"
    goal = goal_line(report["summary"], workload.rate_per_s)
    return text if goal is None else f"{text}\n{goal}\n"


def main() -> None:
    args = _parser().parse_args()
    workload = _workload(args)
    env = _parse_env(args.env)
    _apply_env(env)

    started, load = time.perf_counter(), os.getloadavg()
    results, workload, calibration = asyncio.run(
        run(args.backends, workload, calibrate_rate=args.rate is None)
    )
    report = _report(workload, calibration, env, results, started, load)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1))
    plotted = plot(results, workload.block_s, workload.slow_times(), args.plot)
    print(_caption(workload, report))
    print()
    print(headline_table(report["summary"]))
    print()
    print(breakdown_table(report["summary"]))
    if goal := goal_line(report["summary"], workload.rate_per_s):
        print(f"\n{goal}")
    if args.markdown:
        args.markdown.write_text(_markdown(workload, report))
    shown = args.plot if plotted else "none (matplotlib is not installed)"
    print(f"\n{report['seconds']:.0f} s in all; samples: {args.json}; plot: {shown}")


if __name__ == "__main__":
    main()
