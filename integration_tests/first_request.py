"""The first request of each kind on a fresh engine while every core is busy decoding.

Each constrained request goes with an unconstrained twin (same prompt, same
length); ``constrained - twin`` is what the grammar cost it. Used by
``test_first_request.py`` on the server and, through ``spawned_engine_run.py``,
on ``LLM(...)``. It was a benchmark too until issue 31 retired that study:
docs/benchmarks.md keeps its last tables, with how to rerun it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import statistics
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import psutil
from harness.model import model_tokenizer
from harness.server import ApiServer

from grammar_guard.core.request.grammar_text import grammar_is_lark
from grammar_guard.core.request.spec import CompileOptions
from grammar_guard.demo.cases import CASES, Case, check_json_object

if TYPE_CHECKING:
    from vllm import LLM
    from vllm.outputs import RequestOutput

    from grammar_guard.core.engines.base import GrammarEngine

JSON_OBJECT_CASE = Case("json_object", {"json_object": True}, check_json_object)
KINDS: tuple[Case, ...] = (*CASES, JSON_OBJECT_CASE)
# Long enough that a load request outlives the measurement; the tiny model's
# context is 1024 tokens.
LOAD_MAX_TOKENS = 900
# A batch ends with its longest request: these outlast the measured ones.
OFFLINE_LOAD_TOKENS = 256
# Long unconstrained requests decoding beside the measured ones: enough to keep every core busy.
DECODE_STREAMS = 16
# Enough for every case to finish, so each output can be checked whole.
MEASURED_MAX_TOKENS = 64
REQUEST_TIMEOUT_S = 300.0
PROMPT = "Answer: "
# What the server's disable_any_whitespace flag (GRAMMAR_GUARD_FLAGS) asks for.
COMPACT_JSON = CompileOptions(any_whitespace=False)


@dataclass(frozen=True)
class Timing:
    kind: str
    round: int
    constrained_s: float  # time to the constrained request's first token
    twin_s: float  # the same for its unconstrained twin
    text: str
    finish_reason: str | None
    # The same spec compiled in this process, on the same load, just before.
    compile_s: float

    @property
    def overhead_s(self) -> float:
        return self.constrained_s - self.twin_s


@dataclass
class FirstRequestResult:
    timings: list[Timing] = field(default_factory=list)
    # Whole-machine CPU use while the constrained requests ran (100 = every core).
    cpu_percent: float = 0.0

    def overheads(self) -> list[float]:
        return sorted(timing.overhead_s for timing in self.timings)


def salted(case: Case, salt: int) -> dict[str, Any]:
    """``case``'s structured_outputs as a key the server has not seen (salt 0 is the case)."""
    body = copy.deepcopy(case.structured_outputs)
    if salt == 0:
        return body
    tag = f"r{salt}"
    if "json" in body:
        body["json"]["title"] = tag  # an annotation: the same language, another key
    elif "regex" in body:
        body["regex"] = f"{body['regex']}|{tag}"
    elif "choice" in body:
        body["choice"] = [*body["choice"], tag]
    elif "grammar" in body:
        comment = "//" if grammar_is_lark(body["grammar"]) else "#"
        body["grammar"] += f"\n{comment} {tag}"
    elif "structural_tag" in body:
        tagged = json.loads(body["structural_tag"])
        tagged["format"]["content"]["json_schema"]["title"] = tag
        body["structural_tag"] = json.dumps(tagged)
    elif "json_object" in body:
        body = {"json": {"type": "object", "title": tag}}
    return body


async def _first_token(
    client: httpx.AsyncClient, model: str, extra: Mapping[str, Any], max_tokens: int
) -> tuple[float, str, str | None]:
    """Seconds to the first streamed token, the whole text and the finish reason."""
    body = {
        "model": model,
        "prompt": PROMPT,
        "max_tokens": max_tokens,
        "stream": True,
        "seed": 7,
        **extra,
    }
    started = time.perf_counter()
    first: float | None = None
    text: list[str] = []
    finish: str | None = None
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode(errors="replace")
            raise AssertionError(f"HTTP {response.status_code}: {detail[:500]}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[len("data: ") :])["choices"][0]
            if first is None and choice.get("text"):
                first = time.perf_counter() - started
            text.append(choice.get("text") or "")
            finish = choice.get("finish_reason") or finish
    return (time.perf_counter() - started if first is None else first), "".join(text), finish


@contextlib.asynccontextmanager
async def decode_load(client: httpx.AsyncClient, model: str, streams: int) -> AsyncIterator[None]:
    """``streams`` long unconstrained requests, each replaced when it ends, until exit."""

    async def keep_decoding() -> None:
        while True:
            await _first_token(client, model, {"ignore_eos": True}, LOAD_MAX_TOKENS)

    tasks = [asyncio.create_task(keep_decoding()) for _ in range(streams)]
    try:
        # Every load request is decoding before the first measured one arrives.
        await asyncio.sleep(2.0)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def build_reference_engine(model: str) -> GrammarEngine:
    """The grammar engine the server builds for ``model``, here, to time compiles against."""
    from transformers import PretrainedConfig

    from grammar_guard.core.engines.factory import build_engine

    vocab_size = PretrainedConfig.from_pretrained(model).vocab_size
    return build_engine(model_tokenizer(model), vocab_size)


def compile_seconds(engine: GrammarEngine, structured_outputs: dict[str, Any]) -> float:
    """How long ``engine`` takes to compile the spec the server makes of ``structured_outputs``."""
    from vllm.sampling_params import StructuredOutputsParams

    from grammar_guard.vllm_adapter.request_spec import spec_from_params

    spec = spec_from_params(StructuredOutputsParams(**structured_outputs), COMPACT_JSON)
    started = time.perf_counter()
    engine.compile(spec)
    return time.perf_counter() - started


async def _measure(
    server: ApiServer, engine: GrammarEngine, rounds: int, load: int
) -> FirstRequestResult:
    result = FirstRequestResult()
    limits = httpx.Limits(max_connections=load + 8, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(
            base_url=server.base_url, timeout=REQUEST_TIMEOUT_S, limits=limits
        ) as client,
        decode_load(client, server.model, load),
    ):
        psutil.cpu_percent()  # starts the measurement window
        for round_number in range(rounds):
            for case in KINDS:
                body = salted(case, round_number)
                compile_s = compile_seconds(engine, body)
                constrained, twin = await asyncio.gather(
                    _first_token(
                        client, server.model, {"structured_outputs": body}, MEASURED_MAX_TOKENS
                    ),
                    _first_token(client, server.model, {}, MEASURED_MAX_TOKENS),
                )
                first_token_s, text, finish_reason = constrained
                result.timings.append(
                    Timing(
                        case.name,
                        round_number,
                        first_token_s,
                        twin[0],
                        text,
                        finish_reason,
                        compile_s,
                    )
                )
        result.cpu_percent = psutil.cpu_percent()
    return result


def measure_first_requests(
    server: ApiServer, engine: GrammarEngine, *, rounds: int, load: int
) -> FirstRequestResult:
    """Time ``rounds`` first requests of every kind on ``server`` under ``load`` decode streams.

    ``engine`` (:func:`build_reference_engine`) times each compile here too.
    """
    return asyncio.run(_measure(server, engine, rounds, load))


def measure_offline(
    llm: LLM, engine: GrammarEngine, *, rounds: int, load: int
) -> FirstRequestResult:
    """The same through ``LLM.generate``: per round, one batch of ``load`` long requests and pairs.

    All of a batch arrive at once, as an offline batch does, so the first
    requests of each kind wait for their grammars while the long ones decode.
    A round fits ``max_num_seqs`` (``load`` plus two per kind), so no request
    queues for a batch slot. Times to the first token are the engine's own
    (``RequestOutput.metrics``, which needs ``disable_log_stats=False``);
    compiles are timed here meanwhile.
    """
    result = FirstRequestResult()
    busy: list[float] = []
    for number in range(rounds):
        busy.append(_offline_round(llm, engine, number, load, result.timings))
    result.cpu_percent = statistics.mean(busy)
    return result


def _offline_round(
    llm: LLM, engine: GrammarEngine, number: int, load: int, timings: list[Timing]
) -> float:
    """Run round ``number`` into ``timings``; return the CPU use while its compiles were timed."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    bodies = [(case, salted(case, number)) for case in KINDS]
    long = SamplingParams(max_tokens=OFFLINE_LOAD_TOKENS, ignore_eos=True)
    requests = [long.clone() for _ in range(load)]
    for _, body in bodies:
        structured = StructuredOutputsParams(**body)
        # The twin right after: it reaches the engine no earlier than its pair.
        requests += [
            SamplingParams(max_tokens=MEASURED_MAX_TOKENS, seed=7, structured_outputs=structured),
            SamplingParams(max_tokens=MEASURED_MAX_TOKENS, seed=7),
        ]
    compile_times: list[float] = []
    busy: list[float] = []

    def time_compiles_under_load() -> None:
        psutil.cpu_percent()
        time.sleep(1.0)  # the batch is decoding by then
        compile_times.extend(compile_seconds(engine, body) for _, body in bodies)
        busy.append(psutil.cpu_percent())

    timer = threading.Thread(target=time_compiles_under_load)
    timer.start()
    outputs = llm.generate([PROMPT] * len(requests), requests, use_tqdm=False)
    timer.join()
    for index, (case, _) in enumerate(bodies):
        constrained, twin = outputs[load + 2 * index], outputs[load + 2 * index + 1]
        completion = constrained.outputs[0]
        timings.append(
            Timing(
                case.name,
                number,
                _first_token_latency(constrained),
                _first_token_latency(twin),
                completion.text,
                completion.finish_reason,
                compile_times[index],
            )
        )
    return busy[0]


def _first_token_latency(output: RequestOutput) -> float:
    metrics = output.metrics
    if metrics is None or not hasattr(metrics, "first_token_latency"):
        raise RuntimeError("no request metrics: start the LLM with disable_log_stats=False")
    return float(metrics.first_token_latency)
