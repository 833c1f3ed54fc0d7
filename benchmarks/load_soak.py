"""Load and soak: hundreds of concurrent structured requests against a real server, bounded.

Hot, new and bad schemas against a small compile cache until the engine core's RSS holds level
past the cache bound, or a cap; every answer checked. docs/reliability.md ("The load soak") has
the method and the goals (nothing lost or wrong, no restart, flat memory).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import httpx
import psutil
from benchmarks import cli
from benchmarks.provenance import REPO
from harness.bad_input.builders import completion, constrained
from harness.bad_input.case import SERVER_ARGS, Case, Outcome, Reply, json_output
from harness.bad_input.corpus import CORPUS
from harness.server import ApiServer, engine_core_process, start_api_server

from grammar_guard.demo.tiny_model import build_tiny_model

MIB = float(1 << 20)
# Bad requests are about refusal under load, not upload size.
MAX_BAD_BODY_BYTES = 64 << 10
# Memory counts as flat when RSS moved by at most FLAT_MIB over the judged
# window (the allocator grows in steps of a few MiB), and only over a window
# long enough to show a leak: keeping the grammars compiled meanwhile must
# cost at least LEAK_TO_FLAT times that. Once level, the engine core moved by
# 0.3 and 0.4 MiB over two further passes of 6000 requests.
FLAT_MIB = 16.0
LEAK_TO_FLAT = 2.0


@dataclass(frozen=True)
class SoakConfig:
    # The judged window (memory_trend): the run goes on until it is level, so a
    # leak, which never levels, runs to a cap and fails.
    requests: int = 6000
    max_requests: int = 24000
    concurrency: int = 200
    max_duration_s: float = 1800.0
    request_timeout_s: float = 180.0
    bad_share: float = 0.2
    new_schema_share: float = 0.5  # of the good requests
    hot_schemas: int = 8
    max_tokens: int = 8
    cache_mb: float = 8.0
    sample_interval_s: float = 0.5
    seed: int = 0

    def server_env(self) -> dict[str, str]:
        return {"GRAMMAR_GUARD_CACHE_MB": str(self.cache_mb)}


def distinct_schema(serial: int) -> dict[str, Any]:
    """A bounded object schema of its own for every ``serial``, about 200 KiB compiled.

    Wide integer ranges make compiled grammars heavy for their compile time
    (milliseconds), so the cache fills within seconds and a grammar kept past
    its bound would show in the engine's memory.
    """
    last: dict[str, Any] = (
        {"enum": [f"a{serial}", "b", "c"]}
        if serial % 2
        else {"type": "array", "items": {"type": "boolean"}, "maxItems": 1 + serial % 3}
    )
    properties: dict[str, Any] = {
        f"n{serial}": {"type": "integer", "minimum": 0, "maximum": 100_000 + serial},
        f"m{serial}": {"type": "integer", "minimum": -50_000 - serial, "maximum": 50_000},
        # A pattern, not maxLength: a length-bounded string compiles to a grammar
        # several times larger, whose churn through the allocator would blur a leak.
        f"s{serial}": {"type": "string", "pattern": f"^[a-z]{{0,{3 + serial % 5}}}$"},
        f"t{serial}": last,
    }
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _good(serial: int, schema: dict[str, Any], max_tokens: int) -> Case:
    body = completion({"json": schema}, max_tokens=max_tokens, seed=serial)
    return constrained(f"good-{serial}", body, json_output(schema))


def small_refusals(model: str) -> list[Case]:
    return [
        case
        for case in CORPUS
        if case.expected is Outcome.REFUSED and len(case.body(model)) <= MAX_BAD_BODY_BYTES
    ]


@dataclass(frozen=True)
class Planned:
    kind: str  # "hot", "new" or "bad"
    case: Case


def planned_requests(config: SoakConfig, model: str) -> Iterator[Planned]:
    """The requests of a run, in sending order, without end; the same for the same seed."""
    rng = random.Random(config.seed)
    refusals = small_refusals(model)
    new_serial = config.hot_schemas
    for serial in itertools.count():
        if rng.random() < config.bad_share:
            yield Planned("bad", rng.choice(refusals))
        elif rng.random() < config.new_schema_share:
            yield Planned("new", _good(serial, distinct_schema(new_serial), config.max_tokens))
            new_serial += 1
        else:
            schema = distinct_schema(rng.randrange(config.hot_schemas))
            yield Planned("hot", _good(serial, schema, config.max_tokens))


@dataclass(frozen=True)
class Sample:
    at_s: float
    rss_mib: float
    cache_mib: float
    cache_entries: int
    evictions: int
    compiles: int
    answered: int


def _failed_step(steps: list[str]) -> str:
    """The step of the exchange that failed, from httpcore's trace of it."""
    return next((step for step in steps if step.endswith(".failed")), "no failed step traced")


@dataclass
class _Run:
    """One soak against a server: what it sent, how each request ended, RSS as it went."""

    server: ApiServer
    engine: psutil.Process
    config: SoakConfig
    ended: Counter[str] = field(default_factory=Counter)  # how requests ended, also per kind
    latencies_s: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # a few lost or wrong ones to show
    samples: list[Sample] = field(default_factory=list)
    flat: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.monotonic)

    def record(self, kind: str, result: str, latency_s: float, detail: str = "") -> None:
        self.ended[f"{kind}:{result}"] += 1
        self.ended[result] += 1
        self.latencies_s.append(latency_s)
        if detail and len(self.examples) < 10:
            self.examples.append(detail)

    async def send(self, client: httpx.AsyncClient, planned: Planned) -> None:
        started = time.monotonic()
        steps: list[str] = []  # httpcore's trace of this request: where a lost one broke

        async def trace(event: str, _info: dict[str, Any]) -> None:
            steps.append(event)

        case = planned.case
        try:
            response = await client.post(
                case.endpoint,
                content=case.body(self.server.model),
                headers={"Content-Type": "application/json"},
                extensions={"trace": trace},
            )
        except httpx.HTTPError as exc:
            detail = (
                f"{case.name}, sent {started - self.started:.1f} s into the run, "
                f"after {time.monotonic() - started:.1f} s: {type(exc).__name__}: {exc} "
                f"({_failed_step(steps)})"
            )
            self.record(planned.kind, "lost", time.monotonic() - started, detail[:300])
            return
        latency = time.monotonic() - started
        try:
            case.verify(Reply.parse(response.status_code, response.content))
        except AssertionError as exc:
            self.record(planned.kind, "wrong", latency, f"{case.name}: {exc}"[:300])
            return
        self.record(planned.kind, "ok", latency)

    async def sample(self) -> None:
        metrics = await asyncio.to_thread(self.server.metrics)
        self.samples.append(
            Sample(
                at_s=time.monotonic() - self.started,
                rss_mib=self.engine.memory_info().rss / MIB,
                cache_mib=metrics.get("grammar_guard_cache_bytes", 0.0) / MIB,
                cache_entries=int(metrics.get("grammar_guard_cache_entries", 0)),
                evictions=int(metrics.get("grammar_guard_evictions_total", 0)),
                compiles=int(metrics.get("grammar_guard_compiles_total", 0)),
                answered=len(self.latencies_s),
            )
        )

    async def send_until_stopped(self, client: httpx.AsyncClient) -> str:
        """Send until ``flat`` is set or a cap is reached; why it stopped."""
        config = self.config
        gate = asyncio.Semaphore(config.concurrency)
        in_flight: set[asyncio.Task[None]] = set()

        async def one(item: Planned) -> None:
            try:
                await self.send(client, item)
            finally:
                gate.release()

        planned = planned_requests(config, self.server.model)
        stopped_by = "max requests"
        for item in itertools.islice(planned, config.max_requests):
            await gate.acquire()
            if self.flat.is_set() or time.monotonic() - self.started >= config.max_duration_s:
                gate.release()
                stopped_by = "flat memory" if self.flat.is_set() else "max duration"
                break
            task = asyncio.create_task(one(item))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        await asyncio.gather(*in_flight)
        return stopped_by

    async def drive(self) -> tuple[str, MemoryTrend]:
        """Why the run stopped, and its memory verdict: a run stopped by a flat window is judged
        on that window, not on the samples after it."""
        # A connection for each request: httpcore's pool can close a kept-alive
        # connection it has just handed to a request whose task the load delays
        # (encode/httpcore#1110), and that request would look lost by the server.
        limits = httpx.Limits(max_connections=self.config.concurrency, max_keepalive_connections=0)
        timeout = httpx.Timeout(self.config.request_timeout_s)
        window = self.config.requests
        async with httpx.AsyncClient(
            base_url=self.server.base_url, limits=limits, timeout=timeout
        ) as client:
            sending = asyncio.create_task(self.send_until_stopped(client))
            stopping: MemoryTrend | None = None
            while not sending.done():
                await self.sample()
                trend = memory_trend(self.samples, window)
                if trend.flat and stopping is None:
                    stopping = trend
                    self.flat.set()
                await asyncio.wait([sending], timeout=self.config.sample_interval_s)
            stopped_by = await sending
        await self.sample()
        return stopped_by, stopping or memory_trend(self.samples, window)


@dataclass(frozen=True)
class MemoryTrend:
    """RSS before the load, and how it moved over the judged window, past the cache bound."""

    baseline_mib: float
    peak_mib: float
    bound_reached_s: float | None  # when the cache first evicted
    measured_from_s: float | None  # where the judged window starts, once the run holds one
    drift_mib: float  # median RSS of the window's last quarter less its first's lowest
    compiled: int  # grammars compiled between those two quarters (medians likewise)
    grammar_mib: float  # the average size of a cached grammar

    @property
    def kept_mib(self) -> float:
        """What RSS would have grown by over the window, had the grammars been kept."""
        return self.compiled * self.grammar_mib

    @property
    def flat(self) -> bool:
        return (
            self.measured_from_s is not None
            and self.kept_mib >= LEAK_TO_FLAT * FLAT_MIB
            and self.drift_mib <= FLAT_MIB
        )


def memory_trend(samples: list[Sample], window_requests: int) -> MemoryTrend:
    """Whether RSS stopped following the grammars compiled once the cache bound was reached.

    Judged on the last ``window_requests`` answered requests, all past the bound, in quarters:
    flat when the last quarter's median RSS is at most ``FLAT_MIB`` above the first's lowest,
    while keeping the grammars compiled between them would have cost ``LEAK_TO_FLAT`` times
    that (docs/reliability.md: RSS first climbs to a high-water mark; a leak never levels).
    """
    baseline = samples[0].rss_mib
    peak = max(sample.rss_mib for sample in samples)
    bounded = [sample for sample in samples if sample.evictions > 0]
    bound_reached = bounded[0].at_s if bounded else None
    window_from = samples[-1].answered - window_requests
    measured = [sample for sample in bounded if sample.answered >= window_from]
    if not bounded or bounded[0].answered > window_from or len(measured) < 8:
        return MemoryTrend(baseline, peak, bound_reached, None, 0.0, 0, 0.0)
    start, span = measured[0].at_s, measured[-1].at_s - measured[0].at_s
    first = [s for s in measured if s.at_s < start + span / 4]
    last = [s for s in measured if s.at_s >= start + 3 * span / 4]
    drift = statistics.median(s.rss_mib for s in last) - min(s.rss_mib for s in first)
    compiled = int(
        statistics.median(s.compiles for s in last) - statistics.median(s.compiles for s in first)
    )
    grammar_mib = statistics.mean(s.cache_mib / s.cache_entries for s in bounded if s.cache_entries)
    return MemoryTrend(baseline, peak, bound_reached, start, drift, compiled, grammar_mib)


@dataclass(frozen=True)
class SoakResult:
    config: SoakConfig
    seconds: float
    stopped_by: str  # "flat memory", "max requests" or "max duration"
    ended: dict[str, int]
    failure_examples: list[str]
    latency_p50_s: float
    latency_p99_s: float
    engine_pid_before: int
    engine_pid_after: int | None
    healthy_after: bool
    memory: MemoryTrend
    samples: list[Sample]

    @property
    def lost(self) -> int:
        return self.ended.get("lost", 0)

    @property
    def wrong(self) -> int:
        return self.ended.get("wrong", 0)

    @property
    def restarts(self) -> int:
        """0 when the engine core that began the run answered its end; 1 otherwise."""
        survived = self.healthy_after and self.engine_pid_after == self.engine_pid_before
        return 0 if survived else 1

    def as_json(self) -> dict[str, Any]:
        memory = {**asdict(self.memory), "kept_mib": self.memory.kept_mib, "flat": self.memory.flat}
        counts = {"lost": self.lost, "wrong": self.wrong, "restarts": self.restarts}
        return {"date": str(date.today()), **asdict(self), "memory": memory, **counts}


def _healthy(server: ApiServer) -> bool:
    try:
        return httpx.get(server.base_url + "/health", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def _engine_pid_after(server: ApiServer) -> int | None:
    try:
        return engine_core_process(server).pid
    except LookupError:
        return None


def run_soak(server: ApiServer, config: SoakConfig) -> SoakResult:
    """Drive ``server`` (started with ``config.server_env()``) and measure it."""
    run = _Run(server, engine_core_process(server), config)
    stopped_by, memory = asyncio.run(run.drive())
    latencies = sorted(run.latencies_s) or [0.0]
    return SoakResult(
        config=config,
        seconds=time.monotonic() - run.started,
        stopped_by=stopped_by,
        ended=dict(run.ended),
        failure_examples=run.examples,
        latency_p50_s=latencies[len(latencies) // 2],
        latency_p99_s=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        engine_pid_before=run.engine.pid,
        engine_pid_after=_engine_pid_after(server),
        healthy_after=_healthy(server),
        memory=memory,
        samples=run.samples,
    )


def markdown(result: SoakResult) -> str:
    config, memory, ended = result.config, result.memory, result.ended
    bound = "never" if memory.bound_reached_s is None else f"{memory.bound_reached_s:.0f} s"
    measured = "never" if memory.measured_from_s is None else f"{memory.measured_from_s:.0f} s"
    lines = [
        f"Load soak, {date.today()}: memory judged over the last "
        f"{config.requests} requests, at most {config.max_requests} sent, "
        f"{config.concurrency} at once, max_tokens={config.max_tokens}, "
        f"GRAMMAR_GUARD_CACHE_MB={config.cache_mb:g}; stopped by {result.stopped_by} "
        f"after {result.seconds:.0f} s.",
        "",
        "| requests | hot schema | new schema | bad | lost | wrong | restarts |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {sum(ended.get(k, 0) for k in ('ok', 'wrong', 'lost'))} "
        f"| {ended.get('hot:ok', 0)} | {ended.get('new:ok', 0)} | {ended.get('bad:ok', 0)} "
        f"| {result.lost} | {result.wrong} | {result.restarts} |",
        "",
        "| engine RSS before | peak | cache bound reached | judged from "
        "| drift over the judged window "
        "| grammars compiled meanwhile | had they been kept | flat | latency p50 | latency p99 |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        f"| {memory.baseline_mib:.0f} MiB | {memory.peak_mib:.0f} MiB | {bound} | {measured} "
        f"| {memory.drift_mib:+.1f} MiB | {memory.compiled} x {memory.grammar_mib * 1024:.0f} KiB "
        f"| +{memory.kept_mib:.0f} MiB | {'yes' if memory.flat else 'no'} "
        f"| {result.latency_p50_s:.2f} s | {result.latency_p99_s:.2f} s |",
    ]
    return "\n".join(lines) + "\n"


# The documented options (docs/reliability.md); the other fields keep their defaults.
OPTIONS = ("requests", "max_requests", "concurrency", "max_duration_s", "cache_mb")


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add_fields(parser, SoakConfig(), *OPTIONS)
    parser.add_argument("--json", type=Path, default=REPO / "build" / "load_soak.json")
    args = parser.parse_args()
    config = cli.fields_of(args, SoakConfig, *OPTIONS)
    with start_api_server(str(build_tiny_model()), *SERVER_ARGS, env=config.server_env()) as server:
        result = run_soak(server, config)
    report = markdown(result)
    cli.write_json(args.json, result.as_json())
    cli.write(args.json.with_suffix(".md"), report)
    cli.publish(report, args.markdown)
    for example in result.failure_examples:
        print("lost or wrong:", example)


if __name__ == "__main__":
    main()
