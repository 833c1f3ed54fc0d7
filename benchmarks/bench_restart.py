"""After an engine restart: time to first token and to steady throughput of a slow schema.

Each run is a fresh engine process: vLLM's xgrammar and guidance backends, grammar-guard, and
grammar-guard restarted on a cache folder an earlier run filled, in turn each round; "steady" is
the median rate of a run's last three batches. docs/benchmarks.md ("Restart") has the method.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks import cli
from benchmarks.scoped_env import CLOSED_OBJECTS
from harness.fresh import run_fresh
from harness.model import grammar_guard_service

# Long enough for the slowest compile on a loaded 2-core machine: this
# benchmark measures compiles, it must never time one out.
COMPILE_TIMEOUT_S = 1800
CACHE_FOLDER = "grammar-guard, cache folder"  # restarted on the folder the filling run filled
KINDS = ("vLLM xgrammar", "vLLM guidance", "grammar-guard", CACHE_FOLDER)  # a round's order
VLLM_BACKENDS = {"vLLM xgrammar": "xgrammar", "vLLM guidance": "guidance"}
DURATION_S = 30.0  # seconds of batches per run, at the least
BATCH = 16
MAX_TOKENS = 48
STEADY_BATCHES = 3
STEADY_SHARE = 0.9
# How long a run waits for its key's upgrade (seconds of compile at nice +19,
# after the compile worker has started, which a busy machine makes slow).
UPGRADE_WAIT_S = 300.0


def slow_schema(*lengths: int) -> dict[str, Any]:
    properties = {f"text{i}": {"type": "string", "maxLength": n} for i, n in enumerate(lengths)}
    return {"type": "object", "properties": properties, "required": list(properties)}


# Within the background upgrade's budget (routing.UPGRADE_MAX_COMPILE_S), and
# seconds of xgrammar compile: what a cache folder saves a restart.
FULL_SCHEMA = slow_schema(200, 240)
QUICK_SCHEMA = slow_schema(40)
# The smoke form's key must be one the folder keeps (a load costing at most a tenth
# of the compile): an xgrammar compile of seconds, so it forces xgrammar.
SMOKE_SCHEMA = slow_schema(200)
SMOKE_ENV = {"GRAMMAR_GUARD_ENGINE": "xgrammar"}


@dataclass(frozen=True)
class Plan:
    """What a run measures; each engine gets the schema, the duration and the upgrade's wait."""

    schema: dict[str, Any]
    rounds: int
    duration_s: float  # seconds of batches per run, at the least
    kinds: tuple[str, ...] = KINDS
    upgrade_wait_s: float = UPGRADE_WAIT_S
    env: dict[str, str] = field(default_factory=dict)


def restart(argument: dict[str, Any]) -> dict[str, Any]:
    """The worker: one engine of ``argument["kind"]`` restarted, in a fresh interpreter."""
    from grammar_guard.demo.engine import start_engine

    duration_s, upgrade_wait_s = argument["duration_s"], argument["upgrade_wait_s"]
    backend = VLLM_BACKENDS.get(argument["kind"], "grammar-guard")
    config = {"backend": backend, "disable_any_whitespace": True}
    llm = start_engine(structured_outputs_config=config)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm.generate(["Warm up: "], [SamplingParams(max_tokens=2)], use_tqdm=False)
    schema = argument["schema"]
    first = SamplingParams(max_tokens=1, structured_outputs=StructuredOutputsParams(json=schema))
    started = time.perf_counter()
    llm.generate(["Write it: "], [first], use_tqdm=False)
    ttft_s = time.perf_counter() - started
    service = grammar_guard_service(llm)  # None under vLLM's backends
    constraint = StructuredOutputsParams(json=schema)
    sampling = {"max_tokens": MAX_TOKENS, "temperature": 1.0, "structured_outputs": constraint}
    params = [SamplingParams(**sampling, seed=index) for index in range(BATCH)]
    prompts = [f"Record {index}: " for index in range(BATCH)]
    batches = []
    upgrade: dict[str, Any] | None = None
    paused_after: int | None = None  # batches decoded before the pause, if there was one
    while paused_after is None or len(batches) < paused_after + STEADY_BATCHES:
        batch_started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        ended = time.perf_counter()
        tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
        batches.append({"end_s": ended - started, "tok_s": tokens / (ended - batch_started)})
        if service is not None and upgrade is None and (outcome := _upgrade_outcome(service)):
            upgrade = {"outcome": outcome, "at_s": ended - started, "paused": paused_after}
        done_decoding = ended - started >= duration_s and len(batches) > STEADY_BATCHES
        if paused_after is not None or not done_decoding:
            continue
        if service is None or upgrade_wait_s == 0:
            break  # a vLLM backend, or a run that waits for no upgrade
        # A plugin engine's run goes on until its key's upgrade was decided, or
        # the key was loaded from the folder, or it is clear neither happens.
        if upgrade is not None or _disk_counts(service)["hits"] > 0:
            break
        # Back-to-back batches keep every core busy, and the upgrade's compile
        # at nice +19 gets next to none of them (on a slow day it was undecided
        # after 300 s): pause, as a server between bursts does, then decode a
        # steady state on whichever grammar won.
        service.drain(upgrade_wait_s)
        paused_after = len(batches)
    if service is not None:
        service.drain()  # a filling run's file is complete before it ends
    # The last batch as decoded, for a check that it satisfies the schema.
    last = [
        {"text": o.outputs[0].text, "finish_reason": o.outputs[0].finish_reason} for o in outputs
    ]
    return {
        "ttft_s": ttft_s,
        "batches": batches,
        "upgrade": upgrade,
        "outputs": last,
        **(_disk_counts(service) if service is not None else {}),
    }


def _upgrade_outcome(service: Any) -> str | None:
    """How the key's upgrade ended (done, slower, failed, dropped); None while undecided."""
    from grammar_guard.core.metrics import LabelledCounter

    counts = service.metrics.snapshot().labelled_values(LabelledCounter.UPGRADES)
    return next(iter(counts), None)


def _disk_counts(service: Any) -> dict[str, int]:
    # This engine's own numbers: metrics_snapshot() would add other engine processes'.
    numbers = service.metrics.snapshot().as_dict()
    return {
        name: int(numbers[f"grammar_guard_disk_{name}_total"])
        for name in ("hits", "misses", "writes", "errors", "unpaid_loads")
    }


def steady(run: dict[str, Any]) -> tuple[float, float]:
    """The run's steady rate and the time the first batch reaching 90% of it ended."""
    rates = [batch["tok_s"] for batch in run["batches"]]
    rate = statistics.median(rates[-STEADY_BATCHES:])
    reached = next(b["end_s"] for b in run["batches"] if b["tok_s"] >= STEADY_SHARE * rate)
    return rate, reached


def measure_restarts(plan: Plan, folder: Path) -> dict[str, Any]:
    def fresh_engine(kind: str) -> dict[str, Any]:
        env = {"GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(COMPILE_TIMEOUT_S), **CLOSED_OBJECTS}
        # An empty value is no folder (Settings reads it so): only the cache-folder kind has one.
        env["GRAMMAR_GUARD_CACHE_DIR"] = str(folder) if kind == CACHE_FOLDER else ""
        argument = {"kind": kind, "schema": plan.schema, "duration_s": plan.duration_s}
        argument["upgrade_wait_s"] = plan.upgrade_wait_s
        return dict(run_fresh("benchmarks.bench_restart:restart", argument, env | plan.env))

    # Fills the folder: runs until its key's upgrade was decided, so the folder
    # holds the grammar a restart should start on.
    fill = fresh_engine(CACHE_FOLDER)
    if fill["misses"] != 1 or (plan.upgrade_wait_s and fill["upgrade"] is None):
        raise RuntimeError(f"the filling run did not compile and decide its upgrade: {fill}")
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in plan.kinds}
    for round_ in range(plan.rounds):
        for kind in plan.kinds:
            run = fresh_engine(kind)
            runs[kind].append(run)
            rate, reached = steady(run)
            print(
                f"round {round_ + 1}/{plan.rounds}: {kind}: TTFT {run['ttft_s']:.2f} s, "
                f"steady {rate:.0f} tok/s from {reached:.1f} s",
                file=sys.stderr,
            )
    return {"fill_upgrade": fill["upgrade"], "fill": fill, "runs": runs}


def _landed(upgrade: dict[str, Any]) -> str:
    pause = " (after a pause in decoding)" if upgrade.get("paused") is not None else ""
    return f"{upgrade['outcome']} at {upgrade['at_s']:.1f} s{pause}"


def markdown(report: dict[str, Any]) -> str:
    runs = report["restarts"]["runs"]
    lengths = ", ".join(str(p["maxLength"]) for p in report["schema"]["properties"].values())
    lines = [
        f"Schema with strings of maxLength {lengths}; tiny model, a fresh engine per run, "
        f"{report['rounds']} round(s); batches of {BATCH} requests, `max_tokens={MAX_TOKENS}`, "
        "seeded sampling; medians over rounds. Loaded from the folder: runs whose grammar "
        "came from the cache folder rather than a compile; a load that cost more than a tenth "
        "of the compile it saved is removed from the folder (docs/persistent-cache.md).",
        "",
        "| Engine after restart | TTFT | first batch tok/s | steady tok/s "
        "| time to steady state | loaded from the folder | upgrade |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, kind_runs in runs.items():
        steadies = [steady(run) for run in kind_runs]
        decided = [run["upgrade"] for run in kind_runs if run.get("upgrade")]
        landed = ", ".join(_landed(up) for up in decided) or "-"
        loaded = f"{sum(run['hits'] > 0 for run in kind_runs)} of {len(kind_runs)}"
        unpaid = sum(run.get("unpaid_loads", 0) for run in kind_runs)
        if unpaid:
            loaded += f" ({unpaid} cost over a tenth of the compile: removed)"
        lines.append(
            f"| {kind} | {statistics.median(run['ttft_s'] for run in kind_runs):.2f} s "
            f"| {statistics.median(run['batches'][0]['tok_s'] for run in kind_runs):.0f} "
            f"| {statistics.median(rate for rate, _ in steadies):.0f} "
            f"| {statistics.median(at for _, at in steadies):.1f} s "
            f"| {loaded if 'hits' in kind_runs[0] else '-'} | {landed} |"
        )
    fill_upgrade = report["restarts"]["fill_upgrade"] or {"outcome": "undecided"}
    lines += ["", f"The filling run's upgrade: {fill_upgrade['outcome']}."]
    return "\n".join(lines) + "\n"


def plan_of(arguments: argparse.Namespace) -> Plan:
    if arguments.smoke:
        # The filling run and one restart from the cache folder, no wait for the upgrade.
        return Plan(SMOKE_SCHEMA, 1, 3.0, (CACHE_FOLDER,), upgrade_wait_s=0.0, env=SMOKE_ENV)
    if arguments.quick:
        return Plan(QUICK_SCHEMA, rounds=1, duration_s=3.0)
    return Plan(FULL_SCHEMA, arguments.rounds, DURATION_S)


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="one short round, a smaller schema")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI's form: the filling run and a restart on its folder",
    )
    parser.add_argument("--out-dir", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    plan = plan_of(args)
    report = {"date": date.today().isoformat(), "schema": plan.schema, "rounds": plan.rounds}
    with tempfile.TemporaryDirectory(prefix="grammar-guard-restart-") as folder:
        report["restarts"] = measure_restarts(plan, Path(folder))
    cli.write_json(args.out_dir / "restart.json", report)
    table = markdown(report)
    cli.write(args.out_dir / "restart.md", table)
    cli.publish(table, args.markdown)


if __name__ == "__main__":
    main()
