"""Constrained decoding on a real engine: throughput and per-step cost, grammar-guard against vLLM.

Each configuration is the tiny model's engine in a fresh interpreter (``harness.fresh``); all
take turns, one timed batch at a time. docs/benchmarks.md ("End-to-end decoding") has the method.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from collections.abc import Iterator, Sequence
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
# grammar-guard's throughput against vLLM's backend decoding the same tokens.
THROUGHPUT_GOAL = 1.5
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
TokenIds = list[list[int]]  # per request of a batch


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
OTHER_PAIRS = ((GRAMMAR_GUARD, XGRAMMAR), (GRAMMAR_GUARD, GUIDANCE), (XGRAMMAR, GUIDANCE))
COMPARED_PAIRS = (CHECKED_PAIR, *OTHER_PAIRS)


@dataclass(frozen=True)
class Plan:
    configurations: tuple[str, ...]
    batches: tuple[int, ...]  # per-step comparison; the last is the throughput batch
    runs: int
    env: tuple[tuple[str, str], ...] = ()  # more environment for every engine

    @property
    def throughput_batch(self) -> int:
        return self.batches[-1]


FULL = Plan(tuple(CONFIGURATIONS), (1, 8, 32, 64), runs=3)
# grammar-guard and one vLLM backend, the pair whose token ids must match, in
# about two minutes: engine starts are most of it. Routed grammar-guard's own
# smoke run is bench_head_of_line's.
SMOKE = Plan((XGRAMMAR, GRAMMAR_GUARD_XGRAMMAR), (1, 8), runs=1)


# --- worker: one engine in a fresh interpreter (harness.fresh), one batch per order ---


def engine(argument: dict[str, Any]) -> Iterator[Any]:
    from grammar_guard.demo.engine import start_engine

    configuration, batches = argument["configuration"], argument["batches"]
    llm = start_engine(
        structured_outputs_config={
            "backend": CONFIGURATIONS[configuration][0],
            "disable_any_whitespace": True,
        },
        max_num_seqs=max(batches),
    )
    lengths: dict[int, list[int]] = {}  # per batch size: the last constrained output lengths

    def decode(kind: str, size: int) -> tuple[TokenIds, float]:
        if kind == "twin":
            return _generate(llm, _twins(lengths[size]))
        ids, seconds = _generate(llm, _requests(size, constrained=configuration != NONE))
        lengths[size] = [len(tokens) for tokens in ids]
        return ids, seconds

    for size in batches:
        decode("batch", size)  # warm-up: compiles, first steps
    service = grammar_guard_service(llm)  # other backends have no background work
    if service is not None and not service.drain(DRAIN_TIMEOUT_S):
        raise RuntimeError(f"grammar-guard's background work did not end in {DRAIN_TIMEOUT_S} s")
    order = yield "ready"
    while True:
        ids, seconds = decode(order["kind"], order["size"])
        order = yield {"seconds": seconds, "token_ids": ids}


def _generate(llm: Any, params: list[Any]) -> tuple[TokenIds, float]:
    prompts = [f"Request {i}: " for i in range(len(params))]
    started = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - started
    # A request that lost its grammar ends early: a batch doing less work than the others.
    ended = [output.outputs[0].finish_reason for output in outputs]
    if failed := [reason for reason in ended if reason not in ("stop", "length")]:
        raise RuntimeError(f"{len(failed)} requests of a batch ended with {failed[0]!r}")
    return [list(output.outputs[0].token_ids) for output in outputs], seconds


def _requests(size: int, constrained: bool) -> list[Any]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    def constraint(i: int) -> Any:
        return StructuredOutputsParams(json=SCHEMAS[i % len(SCHEMAS)]) if constrained else None

    return [
        SamplingParams(
            max_tokens=MAX_TOKENS, temperature=1.0, seed=i, structured_outputs=constraint(i)
        )
        for i in range(size)
    ]


def _twins(lengths: list[int]) -> list[Any]:
    """Unconstrained requests that decode exactly ``lengths[i]`` tokens each."""
    from vllm import SamplingParams

    return [
        SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=1.0, seed=i)
        for i, n in enumerate(lengths)
    ]


# --- parent: start the workers, take turns ---


class Worker(Fresh):
    """One configuration's engine, ready once ``result()`` returns; ``run`` times one batch."""

    def __init__(self, configuration: str, plan: Plan) -> None:
        self.name = configuration
        # An engine decodes, and so warms up, only the batches it will be timed on.
        batches = [plan.throughput_batch] if configuration == NONE else plan.batches
        argument = {"configuration": configuration, "batches": list(batches)}
        env = {**dict(plan.env), **CONFIGURATIONS[configuration][1]}
        super().__init__("benchmarks.bench_end_to_end:engine", argument, env)

    def run(self, kind: str, size: int) -> dict[str, Any]:
        return dict(self.send({"kind": kind, "size": size}))


def start_workers(plan: Plan) -> list[Worker]:
    """Every configuration's engine, ready, at most ``STARTS_AT_ONCE`` starting at a time."""
    workers: list[Worker] = []
    try:
        for configuration in plan.configurations:
            if len(workers) >= STARTS_AT_ONCE:
                workers[-STARTS_AT_ONCE].result()  # the longest starting
            workers.append(Worker(configuration, plan))
        for worker in workers[-STARTS_AT_ONCE:]:
            worker.result()
    except BaseException:
        for worker in workers:
            worker.close()
        raise
    return workers


@dataclass
class Runs:
    """One configuration's timed batches of one size; each figure is of the fastest batch."""

    seconds: list[float] = field(default_factory=list)
    twin_seconds: list[float] = field(default_factory=list)
    outputs: list[TokenIds] = field(default_factory=list)  # token ids per run
    twin_lengths_wrong: int = 0  # twins whose output length was not the one asked for

    def record(self, kind: str, result: dict[str, Any]) -> None:
        if kind == "batch":
            self.seconds.append(result["seconds"])
            self.outputs.append(result["token_ids"])
            return
        self.twin_seconds.append(result["seconds"])
        # A twin repeats the lengths of its engine's last constrained batch.
        expected = [len(tokens) for tokens in self.outputs[-1]]
        got = [len(tokens) for tokens in result["token_ids"]]
        self.twin_lengths_wrong += sum(a != b for a, b in zip(expected, got, strict=True))

    def steps(self) -> int:
        """Engine steps of one batch: all requests start together, the longest ends it."""
        return max(len(tokens) for tokens in self.outputs[-1])

    def tokens(self) -> int:
        return sum(len(tokens) for tokens in self.outputs[-1])

    def rate(self) -> float:
        return self.tokens() / min(self.seconds)

    def ms_per_step(self) -> tuple[float, float]:
        """The constrained and the twin batches' best, per engine step."""
        return min(self.seconds) / self.steps() * 1e3, min(self.twin_seconds) / self.steps() * 1e3

    def step_ratio(self) -> float:
        return min(self.seconds) / min(self.twin_seconds)


Results = dict[tuple[str, int], Runs]


def measure(workers: list[Worker], plan: Plan) -> Results:
    results: Results = {}
    for turn in range(plan.runs):
        for size in plan.batches:
            print(f"turn {turn + 1}/{plan.runs}, batch {size}", file=sys.stderr, flush=True)
            for worker in workers if turn % 2 == 0 else workers[::-1]:
                if worker.name == NONE and size != plan.throughput_batch:
                    continue  # unconstrained requests are timed for throughput only
                runs = results.setdefault((worker.name, size), Runs())
                # In odd turns the twin goes first, so neither always follows the other.
                kinds = ("batch", "twin") if turn % 2 == 0 else ("twin", "batch")
                for kind in ("batch",) if worker.name == NONE else kinds:
                    runs.record(kind, worker.run(kind, size))
    return results


# --- token ids ---


@dataclass(frozen=True)
class Agreement:
    identical: int  # requests with the same token ids
    total: int
    explained: int  # of the others: diverged where the second side sampled a kept-out token

    @property
    def unexplained(self) -> int:
        return self.total - self.identical - self.explained


Agreements = dict[tuple[str, str, int], Agreement]


def agreement(ours: TokenIds, theirs: TokenIds, kept_out: frozenset[int] | None) -> Agreement:
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


def compare(plan: Plan, results: Results) -> tuple[Agreements, list[str]]:
    """Each pair's agreement per batch size, and where the checked pair's must not differ."""
    agreements: Agreements = {}
    failures: list[str] = []
    for ours, theirs in COMPARED_PAIRS:
        if ours not in plan.configurations or theirs not in plan.configurations:
            continue
        checked = (ours, theirs) == CHECKED_PAIR
        for batch in plan.batches:
            a, b = results[(ours, batch)].outputs[-1], results[(theirs, batch)].outputs[-1]
            # The kept-out tokens cost seconds: looked up only where the checked pair diverges.
            found = agreement(a, b, kept_out_tokens() if checked and a != b else None)
            agreements[(ours, theirs, batch)] = found
            if checked and found.unexplained:
                failures.append(
                    f"batch {batch}: {found.unexplained} requests of {ours} and {theirs} "
                    "diverge where both grammars should allow the same tokens"
                )
    return agreements, failures


# --- report ---


@dataclass
class Report:
    text: str
    failures: list[str]


def report(plan: Plan, results: Results) -> Report:
    agreements, failures = compare(plan, results)
    tables = Tables(plan, results, agreements)
    unstable = [
        f"{name} at batch {batch}"
        for (name, batch), runs in results.items()
        if any(output != runs.outputs[0] for output in runs.outputs)
    ]
    changed = f"\nOutputs changed from one run to the next: {', '.join(unstable)}.\n"
    return Report(tables.text() + (changed if unstable else ""), failures)


@dataclass
class Tables:
    plan: Plan
    results: Results
    agreements: Agreements

    def runs(self, name: str, size: int | None = None) -> Runs:
        """``name``'s batches of ``size``, by default of the throughput batch."""
        return self.results[(name, size or self.plan.throughput_batch)]

    @functools.cached_property
    def baseline(self) -> str:
        """The faster of vLLM's backends at the throughput batch."""
        vllm = [name for name in (XGRAMMAR, GUIDANCE) if name in self.plan.configurations]
        return max(vllm, key=lambda name: self.runs(name).rate())

    @property
    def constrained(self) -> list[str]:
        return [name for name in self.plan.configurations if name != NONE]

    def text(self) -> str:
        plan, baseline = self.plan, self.baseline
        lines = [
            f"Tiny model, batches of requests alternating schemas A and B (compact JSON, seed = "
            f"request index, max_tokens={MAX_TOKENS}), best of {plan.runs} batch(es) per cell, "
            f"engines taking turns ({date.today().isoformat()})"
            + "".join(f", {name}={value}" for name, value in plan.env)
            + ".",
            "",
            f"Throughput at batch {plan.throughput_batch}, best of {plan.runs} batches, against "
            f"the faster vLLM backend ({baseline}):",
            "",
            *self.throughput_table(),
            "",
            f"Ceiling: {baseline}'s own outputs decoded with no grammar at all (its twin) run at "
            f"{self.runs(baseline).step_ratio():.2f}x its constrained rate; no backend producing "
            "those tokens can go faster than that.",
            "",
            f"Per-step time, each constrained batch against its unconstrained twin (same prompts "
            f"and seeds, the same output length per request, ignore_eos); goal: at most "
            f"{STEP_GOAL:.2f}x:",
            "",
            *self.step_table(),
            "",
            f"Token ids, per batch size (all {plan.throughput_batch} requests of the largest "
            "batch, and so on):",
            "",
            *self.token_table(),
            "",
            *self.goal_lines(),
        ]
        return "\n".join(lines) + "\n"

    def throughput_table(self) -> list[str]:
        baseline = self.baseline
        lines = [
            f"| backend | output tokens | batch (s) | tokens/s | vs {baseline} "
            f"| token ids vs {baseline} |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name in self.plan.configurations:
            runs = self.runs(name)
            if name == NONE:
                ratio, same = "-", "unconstrained: other outputs"
            else:
                ratio, same = f"{runs.rate() / self.runs(baseline).rate():.2f}x", self.same(name)
            lines.append(
                f"| {name} | {runs.tokens()} | {min(runs.seconds):.2f} | {runs.rate():.1f} "
                f"| {ratio} | {same} |"
            )
        return lines

    def same(self, name: str) -> str:
        """Whether ``name``'s token ids at the throughput batch are the baseline's."""
        baseline, size = self.baseline, self.plan.throughput_batch
        if name == baseline:
            return "-"
        found = self.agreements.get((name, baseline, size))
        found = found or self.agreements.get((baseline, name, size))
        if found is None:  # a pair not compared
            same = self.runs(name).outputs[-1] == self.runs(baseline).outputs[-1]
            return "identical" if same else "different: not the same work"
        if found.identical == found.total:
            return "identical"
        kept_out = f", {found.explained} at a kept-out token" if found.explained else ""
        differ = found.total - found.identical
        return f"{differ} of {found.total} requests differ{kept_out}: not the same work"

    def step_table(self) -> list[str]:
        lines = [
            "| backend | batch | steps | constrained (ms/step) | twin (ms/step) "
            "| constrained / twin |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name in self.constrained:
            for size in self.plan.batches:
                runs = self.runs(name, size)
                ours, twin = runs.ms_per_step()
                wrong = runs.twin_lengths_wrong
                flag = f" (twin lengths wrong in {wrong})" if wrong else ""
                lines.append(
                    f"| {name} | {size} | {runs.steps()} | {ours:.1f} | {twin:.1f} "
                    f"| {runs.step_ratio():.3f}x{flag} |"
                )
        return lines

    def token_table(self) -> list[str]:
        batches = self.plan.batches
        lines = ["| pair | " + " | ".join(f"batch {b}" for b in batches) + " |"]
        lines.append("|---|" + "---:|" * len(batches))
        for ours, theirs in dict.fromkeys((ours, theirs) for ours, theirs, _ in self.agreements):
            cells = []
            for batch in batches:
                found = self.agreements[(ours, theirs, batch)]
                cell = f"{found.identical}/{found.total} identical"
                if found.explained:
                    cell += f", {found.explained} at a kept-out token"
                if (ours, theirs) == CHECKED_PAIR and found.unexplained:
                    cell += f", **{found.unexplained} unexplained**"
                cells.append(cell)
            lines.append(f"| {ours} vs {theirs} | " + " | ".join(cells) + " |")
        return lines

    def goal_lines(self) -> list[str]:
        lines = []
        ours, theirs = CHECKED_PAIR
        same = self.agreements.get((ours, theirs, self.plan.throughput_batch))
        if same is not None:
            speedup = self.runs(ours).rate() / self.runs(theirs).rate()
            lines += [
                f"Goal, throughput on equal work: {ours} against {theirs}, which decode the same "
                "tokens (default grammar-guard's differ from both vLLM backends', so its rate is "
                "of other work and judges nothing):",
                "",
                throughput_verdict(speedup, self.runs(theirs).step_ratio(), same),
                "",
            ]
        lines += [f"Goal, per-step time within {STEP_GOAL:.2f}x of the twin:", ""]
        for name in self.constrained:
            ratios = {size: self.runs(name, size).step_ratio() for size in self.plan.batches}
            lines.append(f"- {name}: {step_verdict(ratios)}")
        return lines


def throughput_verdict(speedup: float, ceiling: float, same: Agreement) -> str:
    """Judged only on equal work: requests that differ short of a kept-out token void it."""
    if same.unexplained:
        return (
            f"- quiet: not judged, {same.unexplained} of {same.total} requests differ: "
            "not the same work"
        )
    kept_out = f" ({same.explained} requests differ at a kept-out token)" if same.explained else ""
    line = f"- quiet: {speedup:.2f}x{kept_out}, goal at least {THROUGHPUT_GOAL:.1f}x: "
    if speedup >= THROUGHPUT_GOAL:
        return line + "met"
    if ceiling < THROUGHPUT_GOAL:
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
    parser.add_argument("--smoke", action="store_true", help="2 engines, batches 1 and 8, 1 run")
    parser.add_argument("--env", nargs="+", default=[], type=cli.env_pair, metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else FULL
    plan = dataclasses.replace(plan, runs=args.runs or plan.runs, env=tuple(args.env))
    started = time.perf_counter()
    workers = start_workers(plan)
    print(f"engines ready in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    try:
        results = measure(workers, plan)
    finally:
        for worker in workers:
            worker.close()
    done = report(plan, results)
    cli.publish(done.text, args.markdown)
    print(f"{time.perf_counter() - started:.0f} s in all", file=sys.stderr)
    if done.failures:
        raise SystemExit("token ids differ where they must not:\n" + "\n".join(done.failures))


if __name__ == "__main__":
    main()
