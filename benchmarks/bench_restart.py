"""After an engine restart: time to first token and to steady throughput of a slow schema.

Each run is a fresh engine process: vLLM's xgrammar and guidance backends, grammar-guard, and
grammar-guard restarted on a cache folder an earlier run filled, in turn each round; "steady" is
the median rate of a run's last three batches. docs/benchmarks.md ("Restart") has the method.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
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
KINDS = ("vLLM xgrammar", "vLLM guidance", "grammar-guard", "grammar-guard, cache folder")
_VLLM_BACKENDS = {"vLLM xgrammar": "xgrammar", "vLLM guidance": "guidance"}
BATCH = 16
MAX_TOKENS = 48
STEADY_BATCHES = 3
STEADY_SHARE = 0.9
# How long a run waits for its key's upgrade (seconds of compile at nice +19,
# after the compile worker has started, which a busy machine makes slow).
UPGRADE_WAIT_S = 300.0


def slow_schema(*lengths: int) -> dict[str, Any]:
    names = [f"text{i}" for i in range(len(lengths))]
    return {
        "type": "object",
        "properties": {
            name: {"type": "string", "maxLength": length}
            for name, length in zip(names, lengths, strict=True)
        },
        "required": names,
    }


# Within the background upgrade's budget (routing.UPGRADE_MAX_COMPILE_S), and
# seconds of xgrammar compile: what a cache folder saves a restart.
FULL_SCHEMA = slow_schema(200, 240)
QUICK_SCHEMA = slow_schema(40)
# The smoke form's key must be one the folder keeps (a load costing at most a tenth
# of the compile): an xgrammar compile of seconds, so it forces xgrammar.
SMOKE_SCHEMA = slow_schema(200)
SMOKE_ENV = {"GRAMMAR_GUARD_ENGINE": "xgrammar"}


# --- worker: one engine, one restart, in a fresh interpreter (harness.fresh) ----------


def restart(argument: dict[str, Any]) -> dict[str, Any]:
    from grammar_guard.demo.engine import start_engine

    kind, schema = argument["kind"], argument["schema"]
    duration_s, upgrade_wait_s = argument["duration_s"], argument["upgrade_wait_s"]

    overrides: dict[str, Any] = {}
    if kind in _VLLM_BACKENDS:
        overrides["structured_outputs_config"] = {
            "backend": _VLLM_BACKENDS[kind],
            "disable_any_whitespace": True,
        }
    llm = start_engine(**overrides)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm.generate(["Warm up: "], [SamplingParams(max_tokens=2)], use_tqdm=False)
    first = SamplingParams(max_tokens=1, structured_outputs=StructuredOutputsParams(json=schema))
    started = time.perf_counter()
    llm.generate(["Write it: "], [first], use_tqdm=False)
    ttft_s = time.perf_counter() - started
    constraint = StructuredOutputsParams(json=schema)
    sampling = {"max_tokens": MAX_TOKENS, "temperature": 1.0, "structured_outputs": constraint}
    params = [SamplingParams(**sampling, seed=index) for index in range(BATCH)]
    prompts = [f"Record {index}: " for index in range(BATCH)]
    batches = []
    upgrade: dict[str, Any] | None = None
    paused_after: int | None = None  # batches decoded before the pause, if there was one
    while True:
        batch_started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        ended = time.perf_counter()
        tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
        batches.append({"end_s": ended - started, "tok_s": tokens / (ended - batch_started)})
        if upgrade is None and (outcome := _upgrade_outcome(llm, kind)) is not None:
            upgrade = {"outcome": outcome, "at_s": ended - started, "paused": paused_after}
        # A plugin engine's run goes on until its key's upgrade was decided, or
        # the key was loaded from the folder, or it is clear neither happens.
        decided = upgrade is not None or _disk_counts(llm, kind).get("hits", 0) > 0
        done_decoding = ended - started >= duration_s and len(batches) > STEADY_BATCHES
        pause = done_decoding and not decided and paused_after is None and upgrade_wait_s > 0
        if pause and kind.startswith("grammar-guard"):
            # Back-to-back batches keep every core busy, and the upgrade's
            # compile at nice +19 gets next to none of them (on a slow day it was
            # undecided after 300 s): pause, as a server between bursts does,
            # then decode a steady state on whichever grammar won.
            grammar_guard_service(llm).drain(upgrade_wait_s)
            paused_after = len(batches)
            continue
        resumed = paused_after is not None and len(batches) >= paused_after + STEADY_BATCHES
        settled = decided or kind in _VLLM_BACKENDS or resumed or upgrade_wait_s == 0
        if done_decoding and settled and (paused_after is None or resumed):
            break
    if kind.startswith("grammar-guard"):
        grammar_guard_service(llm).drain()  # a filling run's file is complete before it ends
    # The last batch as decoded, for a check that it satisfies the schema.
    last = [
        {"text": o.outputs[0].text, "finish_reason": o.outputs[0].finish_reason} for o in outputs
    ]
    return {
        "ttft_s": ttft_s,
        "batches": batches,
        "upgrade": upgrade,
        "outputs": last,
        **_disk_counts(llm, kind),
    }


def _upgrade_outcome(llm: Any, kind: str) -> str | None:
    """How the key's upgrade ended (done, slower, failed, dropped); None while undecided."""
    if not kind.startswith("grammar-guard"):
        return None
    from grammar_guard.core.metrics import LabelledCounter

    counts = grammar_guard_service(llm).metrics.snapshot().labelled_values(LabelledCounter.UPGRADES)
    return next(iter(counts), None)


def _disk_counts(llm: Any, kind: str) -> dict[str, int]:
    if not kind.startswith("grammar-guard"):
        return {}
    # This engine's own numbers: metrics_snapshot() would add other engine processes'.
    numbers = grammar_guard_service(llm).metrics.snapshot().as_dict()
    return {
        name: int(numbers[f"grammar_guard_disk_{name}_total"])
        for name in ("hits", "misses", "writes", "errors", "unpaid_loads")
    }


def _restart(
    kind: str,
    schema: dict[str, Any],
    folder: Path,
    duration_s: float,
    upgrade_wait_s: float,
    extra_env: dict[str, str],
) -> dict[str, Any]:
    """Start a fresh engine process of ``kind`` and measure it on ``schema``."""
    env = {"GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(COMPILE_TIMEOUT_S), **CLOSED_OBJECTS, **extra_env}
    # An empty value is no folder (Settings reads it so): only the cache-folder kind has one.
    env["GRAMMAR_GUARD_CACHE_DIR"] = str(folder) if kind == KINDS[-1] else ""
    argument = {"kind": kind, "schema": schema, "duration_s": duration_s}
    argument["upgrade_wait_s"] = upgrade_wait_s
    return dict(run_fresh("benchmarks.bench_restart:restart", argument, env))


def steady(run: dict[str, Any]) -> tuple[float, float]:
    """The run's steady rate and the time the first batch reaching 90% of it ended."""
    rates = [batch["tok_s"] for batch in run["batches"]]
    rate = statistics.median(rates[-STEADY_BATCHES:])
    reached = next(b["end_s"] for b in run["batches"] if b["tok_s"] >= STEADY_SHARE * rate)
    return rate, reached


def measure_restarts(
    schema: dict[str, Any],
    rounds: int,
    folder: Path,
    duration_s: float,
    *,
    kinds: tuple[str, ...] = KINDS,
    upgrade_wait_s: float = UPGRADE_WAIT_S,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    extra_env = extra_env or {}
    # Fills the folder: runs until its key's upgrade was decided, so the folder
    # holds the grammar a restart should start on.
    fill = _restart(
        "grammar-guard, cache folder", schema, folder, duration_s, upgrade_wait_s, extra_env
    )
    if fill["misses"] != 1 or (upgrade_wait_s and fill["upgrade"] is None):
        raise RuntimeError(f"the filling run did not compile and decide its upgrade: {fill}")
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for round_ in range(rounds):
        for kind in kinds:
            run = _restart(kind, schema, folder, duration_s, upgrade_wait_s, extra_env)
            runs[kind].append(run)
            print(
                f"round {round_ + 1}/{rounds}: {kind}: TTFT {run['ttft_s']:.2f} s, "
                f"steady {steady(run)[0]:.0f} tok/s from {steady(run)[1]:.1f} s",
                file=sys.stderr,
            )
    return {"fill_upgrade": fill["upgrade"], "fill": fill, "runs": runs}


# --- report ----------------------------------------------------------------------------


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


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of batches per run")
    parser.add_argument("--quick", action="store_true", help="one short round, a smaller schema")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI's form: one short round on xgrammar (SMOKE_SCHEMA), restarted from the cache "
        "folder only, no wait for an upgrade",
    )
    parser.add_argument("--out-dir", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    quick = args.quick or args.smoke
    schema = SMOKE_SCHEMA if args.smoke else QUICK_SCHEMA if quick else FULL_SCHEMA
    rounds = 1 if quick else args.rounds
    duration_s = 3.0 if quick else args.duration
    with tempfile.TemporaryDirectory(prefix="grammar-guard-restart-") as folder:
        restarts = measure_restarts(
            schema,
            rounds,
            Path(folder),
            duration_s,
            kinds=KINDS[-1:] if args.smoke else KINDS,
            upgrade_wait_s=0.0 if args.smoke else UPGRADE_WAIT_S,
            extra_env=SMOKE_ENV if args.smoke else {},
        )
    report = {
        "date": date.today().isoformat(),
        "schema": schema,
        "rounds": rounds,
        "restarts": restarts,
    }
    cli.write_json(args.out_dir / "restart.json", report)
    table = markdown(report)
    cli.write(args.out_dir / "restart.md", table)
    cli.publish(table, args.markdown)


if __name__ == "__main__":
    main()
