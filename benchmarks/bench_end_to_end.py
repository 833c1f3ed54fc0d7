"""Constrained decoding on a real engine: throughput and per-step cost, grammar-guard against vLLM.

Each configuration is the tiny model's engine in a fresh interpreter (``harness.fresh``); all
take turns, one timed batch at a time. docs/benchmarks.md ("End-to-end decoding") has the method.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from benchmarks import cli
from benchmarks.scoped_env import CLOSED_OBJECTS
from benchmarks.vocabulary import kept_out_of_strings
from harness.fresh import Fresh
from harness.model import grammar_guard_service, model_tokenizer

from grammar_guard.demo.cases import TAGS_SCHEMA

SCHEMA_A: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sku": {"type": "string", "maxLength": 8},
        "qty": {"type": "integer", "minimum": 1, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["new", "sale", "eco"]}, "maxItems": 3},
    },
    "required": ["sku", "qty", "tags"],
}
SCHEMAS = (SCHEMA_A, TAGS_SCHEMA)
# Both schemas are bounded: every constrained output ends well inside this.
MAX_TOKENS = 64
STEP_GOAL = 1.05
# Default grammar-guard's throughput against the faster vLLM backend.
QUIET_GOAL, BUSY_GOAL = 1.5, 1.1
# Long enough for the slowest compile here on a loaded 2-core machine; a timed
# batch must never wait for one.
DRAIN_TIMEOUT_S = 600.0
# Engines starting at once: enough to keep two cores busy while one waits on
# its disk, few enough that five engines' memory never peaks together.
STARTS_AT_ONCE = 3
# A warm-up compile on a machine busy starting engines can take far longer
# than the default 30 s limit; timing it out would leave the key uncached
# (and, repeated, refused), and this benchmark measures cached keys only.
COMPILE_TIMEOUT_S = "1800"

NONE, XGRAMMAR, GUIDANCE = "none", "xgrammar", "guidance"
GRAMMAR_GUARD, GRAMMAR_GUARD_XGRAMMAR = "grammar-guard", "grammar-guard-xgrammar"


# Per configuration: the vLLM structured-outputs backend and the settings its engine starts with.
def _guarded(engine: str) -> tuple[str, dict[str, str]]:
    timeout = {"GRAMMAR_GUARD_COMPILE_TIMEOUT_S": COMPILE_TIMEOUT_S}
    return "grammar-guard", {"GRAMMAR_GUARD_ENGINE": engine, **timeout, **CLOSED_OBJECTS}


CONFIGURATIONS: dict[str, tuple[str, dict[str, str]]] = {
    NONE: (XGRAMMAR, {}),  # vLLM's default; its requests carry no constraint
    XGRAMMAR: (XGRAMMAR, {}),
    GUIDANCE: (GUIDANCE, {}),
    GRAMMAR_GUARD: _guarded("auto"),
    GRAMMAR_GUARD_XGRAMMAR: _guarded("xgrammar"),
}
# The same engine behind both: their token ids must match, short of a kept-out
# token the second sampled (vocabulary.py). The other pairs are only reported.
CHECKED_PAIR = (GRAMMAR_GUARD_XGRAMMAR, XGRAMMAR)
COMPARED_PAIRS = (
    CHECKED_PAIR,
    (GRAMMAR_GUARD, XGRAMMAR),
    (GRAMMAR_GUARD, GUIDANCE),
    (XGRAMMAR, GUIDANCE),
)


@dataclass(frozen=True)
class Plan:
    configurations: tuple[str, ...]
    batches: tuple[int, ...]  # per-step comparison; the last is the throughput batch
    runs: int
    busy_runs: int  # busy batches per engine, judged by their median
    env: tuple[tuple[str, str], ...] = ()  # more environment for every engine

    @property
    def throughput_batch(self) -> int:
        return self.batches[-1]


FULL = Plan(tuple(CONFIGURATIONS), (1, 8, 32, 64), runs=3, busy_runs=7)
# grammar-guard and one vLLM backend, the pair whose token ids must match, in
# about two minutes: engine starts are most of it. Routed grammar-guard's own
# smoke run is bench_head_of_line's.
SMOKE = Plan((XGRAMMAR, GRAMMAR_GUARD_XGRAMMAR), (1, 8), runs=1, busy_runs=1)


# --- worker: one engine in a fresh interpreter (harness.fresh), one batch per order ---


def engine(argument: dict[str, Any]) -> Iterator[Any]:
    from grammar_guard.demo.engine import start_engine

    configuration, batches = argument["configuration"], argument["batches"]
    backend, _ = CONFIGURATIONS[configuration]
    llm = start_engine(
        structured_outputs_config={"backend": backend, "disable_any_whitespace": True},
        max_num_seqs=max(batches),
    )
    constrained = configuration != NONE
    lengths: dict[int, list[int]] = {}  # per batch size: the last constrained output lengths
    for size in batches:
        ids, _ = _generate(llm, _requests(size, constrained))  # warm-up: compiles, first steps
        lengths[size] = [len(tokens) for tokens in ids]
    service = grammar_guard_service(llm)  # other backends have no background work
    if service is not None and not service.drain(DRAIN_TIMEOUT_S):
        raise RuntimeError(f"grammar-guard's background work did not end in {DRAIN_TIMEOUT_S} s")
    order = yield "ready"
    while True:
        size = order["size"]
        if order["kind"] == "twin":
            ids, seconds = _generate(llm, _twins(lengths[size]))
        else:
            ids, seconds = _generate(llm, _requests(size, constrained))
            lengths[size] = [len(tokens) for tokens in ids]
        order = yield {"seconds": seconds, "token_ids": ids}


def _generate(llm: Any, batch: tuple[list[str], list[Any]]) -> tuple[list[list[int]], float]:
    prompts, params = batch
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    # A request that lost its grammar ends early: a batch doing less work than the others.
    ended = [output.outputs[0].finish_reason for output in outputs]
    if failed := [reason for reason in ended if reason not in ("stop", "length")]:
        raise RuntimeError(f"{len(failed)} requests of a batch ended with {failed[0]!r}")
    return [list(output.outputs[0].token_ids) for output in outputs], seconds


def _prompts(size: int) -> list[str]:
    return [f"Request {i}: " for i in range(size)]


def _requests(size: int, constrained: bool) -> tuple[list[str], list[Any]]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    def constraint(i: int) -> Any:
        return StructuredOutputsParams(json=SCHEMAS[i % len(SCHEMAS)]) if constrained else None

    sampling = {"max_tokens": MAX_TOKENS, "temperature": 1.0}
    params = [
        SamplingParams(**sampling, seed=i, structured_outputs=constraint(i)) for i in range(size)
    ]
    return _prompts(size), params


def _twins(lengths: list[int]) -> tuple[list[str], list[Any]]:
    """Unconstrained requests that decode exactly ``lengths[i]`` tokens each."""
    from vllm import SamplingParams

    exact = [{"max_tokens": n, "min_tokens": n, "ignore_eos": True} for n in lengths]
    params = [SamplingParams(**e, temperature=1.0, seed=i) for i, e in enumerate(exact)]
    return _prompts(len(lengths)), params


# --- parent: start the workers, take turns, report ---


class Worker:
    def __init__(self, configuration: str, plan: Plan) -> None:
        self.name = configuration
        # An engine decodes, and so warms up, only the batches it will be timed on.
        batches = [plan.throughput_batch] if configuration == NONE else plan.batches
        argument = {"configuration": configuration, "batches": list(batches)}
        env = {**dict(plan.env), **CONFIGURATIONS[configuration][1]}
        self._fresh = Fresh("benchmarks.bench_end_to_end:engine", argument, env)

    def wait_ready(self) -> None:
        self._fresh.result()

    def run(self, kind: str, size: int) -> dict[str, Any]:
        return dict(self._fresh.send({"kind": kind, "size": size}))

    def close(self) -> None:
        self._fresh.close()


def start_workers(plan: Plan) -> list[Worker]:
    """Every configuration's engine, ready, at most ``STARTS_AT_ONCE`` starting at a time."""
    waiting, starting, ready = list(plan.configurations), [], []
    try:
        while waiting or starting:
            while waiting and len(starting) < STARTS_AT_ONCE:
                starting.append(Worker(waiting.pop(0), plan))
            starting[0].wait_ready()
            ready.append(starting.pop(0))
    except BaseException:
        for worker in ready + starting:
            worker.close()
        raise
    return ready


@dataclass
class Runs:
    """One configuration's timed batches of one size, summarised by ``statistic``."""

    statistic: Callable[[list[float]], float] = min
    seconds: list[float] = field(default_factory=list)
    twin_seconds: list[float] = field(default_factory=list)
    outputs: list[list[list[int]]] = field(default_factory=list)  # token ids per run
    twin_lengths_wrong: int = 0  # twins whose output length was not the one asked for

    def batch_seconds(self) -> float:
        return self.statistic(self.seconds)

    def steps(self) -> int:
        """Engine steps of one batch: all requests start together, the longest ends it."""
        return max(len(tokens) for tokens in self.outputs[-1])

    def tokens(self) -> int:
        return sum(len(tokens) for tokens in self.outputs[-1])

    def stable(self) -> bool:
        return all(output == self.outputs[0] for output in self.outputs)

    def ms_per_step(self) -> tuple[float, float]:
        """The constrained and the twin batches' summary, per engine step."""
        steps = self.steps()
        return (
            self.statistic(self.seconds) / steps * 1e3,
            self.statistic(self.twin_seconds) / steps * 1e3,
        )

    def step_ratio(self) -> float:
        constrained, twin = self.ms_per_step()
        return constrained / twin


Results = dict[tuple[str, int], Runs]


@dataclass(frozen=True)
class Measured:
    quiet: Results
    busy: Results  # the throughput batch only, with every core also spinning


def measure(workers: list[Worker], plan: Plan) -> Measured:
    return Measured(_measure_quiet(workers, plan), _measure_busy(workers, plan))


def _measure_quiet(workers: list[Worker], plan: Plan) -> Results:
    results: Results = {}
    for turn in range(plan.runs):
        for size in plan.batches:
            print(f"turn {turn + 1}/{plan.runs}, batch {size}", file=sys.stderr, flush=True)
            for worker in workers if turn % 2 == 0 else workers[::-1]:
                if worker.name == NONE and size != plan.throughput_batch:
                    continue  # unconstrained requests are timed for throughput only
                runs = results.setdefault((worker.name, size), Runs())
                if worker.name == NONE:
                    _record(runs, worker.run("batch", size))
                    continue
                _record_with_twin(runs, worker, size, turn)
    return results


def _record_with_twin(runs: Runs, worker: Worker, size: int, turn: int) -> None:
    # The twin repeats the lengths of the engine's last constrained batch; in
    # odd turns it goes first, so neither always follows the other.
    if turn % 2 == 0:
        _record(runs, worker.run("batch", size))
        _record_twin(runs, worker.run("twin", size))
    else:
        _record_twin(runs, worker.run("twin", size))
        _record(runs, worker.run("batch", size))


def _measure_busy(workers: list[Worker], plan: Plan) -> Results:
    results: Results = {}
    size = plan.throughput_batch
    with spinning(os.cpu_count() or 1):
        for turn in range(plan.busy_runs):
            print(
                f"busy turn {turn + 1}/{plan.busy_runs}, batch {size}", file=sys.stderr, flush=True
            )
            for worker in workers if turn % 2 == 0 else workers[::-1]:
                runs = results.setdefault((worker.name, size), Runs(statistics.median))
                # vLLM's backends also decode their twins: the busy ceiling is theirs.
                if worker.name in (XGRAMMAR, GUIDANCE):
                    _record_with_twin(runs, worker, size, turn)
                else:
                    _record(runs, worker.run("batch", size))
    return results


@contextlib.contextmanager
def spinning(count: int) -> Iterator[None]:
    """``count`` processes that keep a core each busy, at the engines' priority, until exit."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def _record(runs: Runs, result: dict[str, Any]) -> None:
    runs.seconds.append(result["seconds"])
    runs.outputs.append(result["token_ids"])


def _record_twin(runs: Runs, result: dict[str, Any]) -> None:
    runs.twin_seconds.append(result["seconds"])
    expected = [len(tokens) for tokens in runs.outputs[-1]] if runs.outputs else []
    got = [len(tokens) for tokens in result["token_ids"]]
    runs.twin_lengths_wrong += sum(a != b for a, b in zip(expected, got, strict=True))


# --- token ids ---


@dataclass(frozen=True)
class Agreement:
    identical: int  # requests with the same token ids
    total: int
    explained: int  # of the others: diverged where the second side sampled a kept-out token

    @property
    def unexplained(self) -> int:
        return self.total - self.identical - self.explained


def agreement(
    ours: list[list[int]], theirs: list[list[int]], kept_out: frozenset[int] | None
) -> Agreement:
    identical = explained = 0
    for a, b in zip(ours, theirs, strict=True):
        if a == b:
            identical += 1
            continue
        first = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if kept_out is not None and first is not None and b[first] in kept_out:
            explained += 1
    return Agreement(identical, len(ours), explained)


@functools.cache
def kept_out_tokens() -> frozenset[int]:
    tokenizer = model_tokenizer()
    return kept_out_of_strings(tokenizer, len(tokenizer))


# --- report ---


def _constrained(plan: Plan) -> list[str]:
    return [name for name in plan.configurations if name != NONE]


def _rate(runs: Runs) -> float:
    return runs.tokens() / runs.batch_seconds()


@dataclass
class Report:
    text: str
    failures: list[str]


def report(plan: Plan, measured: Measured) -> Report:
    results = measured.quiet
    size = plan.throughput_batch
    agreements: dict[tuple[str, str, int], Agreement] = {}
    failures: list[str] = []
    kept_out: frozenset[int] | None = None
    for ours, theirs in COMPARED_PAIRS:
        if ours not in plan.configurations or theirs not in plan.configurations:
            continue
        for batch in plan.batches:
            a, b = results[(ours, batch)].outputs[-1], results[(theirs, batch)].outputs[-1]
            if (ours, theirs) == CHECKED_PAIR and a != b and kept_out is None:
                kept_out = kept_out_tokens()  # costs seconds: only when there is a divergence
            checked = kept_out if (ours, theirs) == CHECKED_PAIR else None
            found = agreements[(ours, theirs, batch)] = agreement(a, b, checked)
            if (ours, theirs) == CHECKED_PAIR and found.unexplained:
                failures.append(
                    f"batch {batch}: {found.unexplained} requests of {ours} and {theirs} "
                    "diverge where both grammars should allow the same tokens"
                )
    lines = [
        f"Tiny model, batches of requests alternating schemas A and B (compact JSON, seed = "
        f"request index, max_tokens={MAX_TOKENS}), best of {plan.runs} batch(es) per quiet "
        f"cell, median of {plan.busy_runs} per busy one, engines taking turns "
        f"({date.today().isoformat()})"
        + "".join(f", {name}={value}" for name, value in plan.env)
        + ".",
        "",
        *_throughput_table(plan, results, agreements, f", best of {plan.runs} batches"),
        "",
        _ceiling_line(plan, results, ""),
        "",
        *_throughput_table(
            plan,
            measured.busy,
            agreements,
            f" with every core busy ({_spinners()}), median of {plan.busy_runs} batches",
        ),
        "",
        _ceiling_line(plan, measured.busy, " with every core busy"),
        "",
        f"Per-step time, each constrained batch against its unconstrained twin (same prompts "
        f"and seeds, the same output length per request, ignore_eos); goal: at most "
        f"{STEP_GOAL:.2f}x:",
        "",
        *_step_table(plan, results),
        "",
        f"Token ids, per batch size (all {size} requests of the largest batch, and so on):",
        "",
        *_token_table(plan, agreements),
        "",
        *_goal_lines(plan, measured),
    ]
    unstable = [
        f"{name} at batch {batch}{where}"
        for where, runs_of in (("", results), (" (busy)", measured.busy))
        for (name, batch), runs in runs_of.items()
        if not runs.stable() or runs.outputs[0] != results[(name, batch)].outputs[0]
    ]
    if unstable:
        lines += ["", f"Outputs changed from one run to the next: {', '.join(unstable)}."]
    return Report("\n".join(lines) + "\n", failures)


def _spinners() -> str:
    return f"{os.cpu_count() or 1} spinning processes, one per core"


def _baseline(plan: Plan, results: Results) -> str:
    """The faster of vLLM's backends at the throughput batch."""
    vllm = [name for name in (XGRAMMAR, GUIDANCE) if name in plan.configurations]
    return max(vllm, key=lambda name: _rate(results[(name, plan.throughput_batch)]))


def _speedup(plan: Plan, results: Results, name: str) -> float:
    size = plan.throughput_batch
    return _rate(results[(name, size)]) / _rate(results[(_baseline(plan, results), size)])


def _ceiling(plan: Plan, results: Results) -> tuple[str, float]:
    """The faster vLLM backend, and how much faster its twin decodes its own outputs."""
    baseline = _baseline(plan, results)
    return baseline, results[(baseline, plan.throughput_batch)].step_ratio()


def _ceiling_line(plan: Plan, results: Results, where: str) -> str:
    baseline, ceiling = _ceiling(plan, results)
    return (
        f"Ceiling{where}: {baseline}'s own outputs decoded with no grammar at all (its twin) "
        f"run at {ceiling:.2f}x its constrained rate; no backend producing those tokens can "
        "go faster than that."
    )


def _throughput_table(
    plan: Plan,
    results: Results,
    agreements: dict[tuple[str, str, int], Agreement],
    condition: str,
) -> list[str]:
    size = plan.throughput_batch
    baseline = _baseline(plan, results)
    lines = [
        f"Throughput at batch {size}{condition}, against the faster vLLM backend ({baseline}):",
        "",
        f"| backend | output tokens | batch (s) | tokens/s | vs {baseline} "
        f"| token ids vs {baseline} |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for name in plan.configurations:
        runs = results[(name, size)]
        if name == NONE:
            ratio, same = "-", "unconstrained: other outputs"
        else:
            ratio = f"{_speedup(plan, results, name):.2f}x"
            same = _same_tokens(name, baseline, size, results, agreements)
        lines.append(
            f"| {name} | {runs.tokens()} | {runs.batch_seconds():.2f} | {_rate(runs):.1f} "
            f"| {ratio} | {same} |"
        )
    return lines


def _same_tokens(
    name: str,
    baseline: str,
    size: int,
    results: Results,
    agreements: dict[tuple[str, str, int], Agreement],
) -> str:
    if name == baseline:
        return "-"
    found = agreements.get((name, baseline, size)) or agreements.get((baseline, name, size))
    if found is None:
        same = results[(name, size)].outputs[-1] == results[(baseline, size)].outputs[-1]
        return "identical" if same else "different: not the same work"
    if found.identical == found.total:
        return "identical"
    kept_out = f", {found.explained} at a kept-out token" if found.explained else ""
    differ = found.total - found.identical
    return f"{differ} of {found.total} requests differ{kept_out}: not the same work"


def _step_table(plan: Plan, results: Results) -> list[str]:
    lines = [
        "| backend | batch | steps | constrained (ms/step) | twin (ms/step) | constrained / twin |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in _constrained(plan):
        for size in plan.batches:
            runs = results[(name, size)]
            ours, twin = runs.ms_per_step()
            wrong = runs.twin_lengths_wrong
            flag = f" (twin lengths wrong in {wrong})" if wrong else ""
            lines.append(
                f"| {name} | {size} | {runs.steps()} | {ours:.1f} | {twin:.1f} "
                f"| {runs.step_ratio():.3f}x{flag} |"
            )
    return lines


def _token_table(plan: Plan, agreements: dict[tuple[str, str, int], Agreement]) -> list[str]:
    lines = ["| pair | " + " | ".join(f"batch {b}" for b in plan.batches) + " |"]
    lines.append("|---|" + "---:|" * len(plan.batches))
    pairs = dict.fromkeys((ours, theirs) for ours, theirs, _ in agreements)
    for ours, theirs in pairs:
        cells = []
        for batch in plan.batches:
            found = agreements[(ours, theirs, batch)]
            cell = f"{found.identical}/{found.total} identical"
            if found.explained:
                cell += f", {found.explained} at a kept-out token"
            if (ours, theirs) == CHECKED_PAIR and found.unexplained:
                cell += f", **{found.unexplained} unexplained**"
            cells.append(cell)
        lines.append(f"| {ours} vs {theirs} | " + " | ".join(cells) + " |")
    return lines


def _goal_lines(plan: Plan, measured: Measured) -> list[str]:
    lines = []
    ours, theirs = CHECKED_PAIR
    if ours in plan.configurations and theirs in plan.configurations:
        lines += [
            f"Goal, throughput on equal work: {ours} against {theirs}, which decode the same "
            "tokens (default grammar-guard's differ from both vLLM backends', so its rate is of "
            "other work and judges nothing):",
            "",
        ]
        for condition, results, goal in (
            ("quiet", measured.quiet, QUIET_GOAL),
            ("busy", measured.busy, BUSY_GOAL),
        ):
            size = plan.throughput_batch
            a, b = results[(ours, size)].outputs[-1], results[(theirs, size)].outputs[-1]
            same = agreement(a, b, kept_out_tokens() if a != b else None)
            speedup = _rate(results[(ours, size)]) / _rate(results[(theirs, size)])
            ceiling = results[(theirs, size)].step_ratio()
            lines.append(throughput_verdict(condition, speedup, goal, ceiling, same))
        lines.append("")
    lines += [f"Goal, per-step time within {STEP_GOAL:.2f}x of the twin:", ""]
    for name in _constrained(plan):
        ratios = {size: measured.quiet[(name, size)].step_ratio() for size in plan.batches}
        lines.append(f"- {name}: {step_verdict(ratios)}")
    return lines


def throughput_verdict(
    condition: str, speedup: float, goal: float, ceiling: float, same: Agreement
) -> str:
    """Judged only on equal work: requests that differ short of a kept-out token void it."""
    if same.unexplained:
        return (
            f"- {condition}: not judged, {same.unexplained} of {same.total} requests differ: "
            "not the same work"
        )
    kept_out = f" ({same.explained} requests differ at a kept-out token)" if same.explained else ""
    line = f"- {condition}: {speedup:.2f}x{kept_out}, goal at least {goal:.1f}x: "
    if speedup >= goal:
        return line + "met"
    if ceiling < goal:
        return line + (
            f"not met, and beyond the ceiling ({ceiling:.2f}x): no backend producing "
            "these tokens can reach it on this machine"
        )
    return line + f"not met, under the ceiling ({ceiling:.2f}x): the gap is grammar-guard's"


def step_verdict(ratios: dict[int, float]) -> str:
    """Per batch size: over the goal, met, or below 1.0 (faster than no grammar: noise)."""

    def at(sizes: list[int]) -> str:
        return ", ".join(f"batch {size} ({ratios[size]:.2f}x)" for size in sizes)

    missed = [size for size, ratio in ratios.items() if ratio > STEP_GOAL]
    noise = [size for size, ratio in ratios.items() if ratio < 1.0]
    met = [size for size in ratios if size not in missed and size not in noise]
    parts = [f"not met at {at(missed)}"] if missed else []
    parts += [f"met at {at(met)}"] if met else []
    parts += [f"within noise at {at(noise)}"] if noise else []
    return "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--runs", type=int, help=f"timed batches per cell (default {FULL.runs})")
    parser.add_argument("--busy-runs", type=int, help=f"default {FULL.busy_runs}")
    parser.add_argument("--smoke", action="store_true", help="2 engines, batches 1 and 8, 1 run")
    parser.add_argument("--env", nargs="+", default=[], type=cli.env_pair, metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else FULL
    plan = Plan(
        plan.configurations,
        plan.batches,
        args.runs or plan.runs,
        args.busy_runs or plan.busy_runs,
        tuple(args.env),
    )
    started = time.perf_counter()
    workers = start_workers(plan)
    print(f"engines ready in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    try:
        measured = measure(workers, plan)
    finally:
        for worker in workers:
            worker.close()
    done = report(plan, measured)
    cli.publish(done.text, args.markdown)
    print(f"{time.perf_counter() - started:.0f} s in all", file=sys.stderr)
    if done.failures:
        raise SystemExit("token ids differ where they must not:\n" + "\n".join(done.failures))


if __name__ == "__main__":
    main()
