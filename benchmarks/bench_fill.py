"""Bitmask fill time per engine step: vLLM's xgrammar and guidance backends against grammar-guard.

Every side runs the installed vLLM's real ``StructuredOutputManager.grammar_bitmask``
in one process on the 129k-token tokenizer, the sides taking turns step by
step; docs/benchmarks.md ("Bitmask fill") describes the two tables and their
goal. grammar-guard on xgrammar must fill vLLM xgrammar's masks short of
kept-out tokens (``vocabulary.py``), or the run fails.

    .venv/bin/python -m benchmarks.bench_fill [--repeats 15] [--batch-sizes 1 8 32 128]
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from types import SimpleNamespace
from typing import Any

import numpy as np
from benchmarks import cli
from benchmarks.scoped_env import CLOSED_OBJECTS, scoped_environment
from benchmarks.vocabulary import as_bitmask_row, kept_out_of_strings
from harness.model import model_tokenizer

BATCH_SIZES = (1, 8, 32, 128)
VOCAB_SIZE = 129280
EASY_SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
    "required": ["color", "n"],
}
HARD_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 300}},
    "required": ["text"],
}
# Where each request stands; request i takes prefix i modulo the list.
EASY_PREFIXES = ("", '{"color":"', '{"color":"red","n":', '{"color":"blue","n":12')
HARD_PREFIXES = ('{"text":"', '{"text":"hello wor', '{"text":"a short note about the weather, ')
# Long enough for the slowest compile here (xgrammar, the 300-character string,
# on a loaded 2-core machine); the benchmark must time fills, never a compile.
DRAIN_TIMEOUT_S = 600.0
# grammar-guard compiles in threads: this measures fills, and worker processes would only add
# their start-up to the run.
OUR_SETTINGS = {"GRAMMAR_GUARD_COMPILE_ISOLATION": "thread", **CLOSED_OBJECTS}

Request = tuple[dict[str, Any], str]
Masks = dict[str, list[np.ndarray]]  # each step's mask rows, by side
VLLM_XGRAMMAR, VLLM_GUIDANCE = "vLLM xgrammar", "vLLM guidance"
GG_XGRAMMAR, GG_ROUTED = "grammar-guard, xgrammar", "grammar-guard"
RECORDED = "recorded for an upgrade trial"


def _cycle(schema: dict[str, Any], prefixes: Sequence[str]) -> Callable[[int], list[Request]]:
    return lambda n: [(schema, prefixes[i % len(prefixes)]) for i in range(n)]


def _one_hard(n: int) -> list[Request]:
    """One request inside a long string, the rest simple: a common serving mix."""
    return [(HARD_SCHEMA, HARD_PREFIXES[1]), *_cycle(EASY_SCHEMA, EASY_PREFIXES)(n)[1:]]


# The tables' grammars column, and the requests of a batch of each size.
WORKLOADS: dict[str, Callable[[int], list[Request]]] = {
    "easy": _cycle(EASY_SCHEMA, EASY_PREFIXES),
    "hard": _cycle(HARD_SCHEMA, HARD_PREFIXES),
    "1 hard + easy": _one_hard,
}


def _manager(backend: Any, max_rows: int) -> Any:
    """A StructuredOutputManager holding only what ``grammar_bitmask`` reads."""
    import torch
    from vllm.v1.structured_output import StructuredOutputManager

    manager = object.__new__(StructuredOutputManager)
    manager.backend = backend
    manager.vllm_config = SimpleNamespace(
        num_speculative_tokens=0,
        scheduler_config=SimpleNamespace(max_num_seqs=max_rows),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    manager._grammar_bitmask = None
    manager._full_mask = torch.tensor(-1, dtype=torch.int32)
    manager.fill_bitmask_parallel_threshold = 128
    manager.enable_in_reasoning = False
    manager.reasoner_cls = None
    return manager


@dataclass
class Side:
    """One way of filling a step: a manager, whose backend compiles its grammars, and a fill."""

    name: str
    manager: Any
    function: Callable[..., Any]
    hooked: bool  # grammar-guard's fill hook runs (it counts the strategies it used)
    requests: dict[str, Any] = field(default_factory=dict)
    engines: Counter[str] = field(default_factory=Counter)  # rows per engine, grammar-guard only
    recorded: Counter[str] = field(default_factory=Counter)  # of those, rows a trial records
    times: list[float] = field(default_factory=list)
    strategies: Counter[str] = field(default_factory=Counter)

    def load(self, tokenizer: Any, requests: list[Request]) -> None:
        from vllm.v1.structured_output.backend_types import StructuredOutputOptions

        from grammar_guard.core.upgrade.trial import PathRecorder

        self.requests, self.times = {}, []
        self.engines, self.recorded, self.strategies = Counter(), Counter(), Counter()
        for i, (schema, prefix) in enumerate(requests):
            grammar = self.manager.backend.compile_grammar(
                StructuredOutputOptions.JSON, json.dumps(schema)
            )
            assert grammar.accept_tokens("r", tokenizer.encode(prefix, add_special_tokens=False))
            if self.hooked:
                matcher = grammar.batch_matcher()
                engine = str(matcher.engine_name)
                self.engines[engine] += 1
                self.recorded[engine] += isinstance(matcher, PathRecorder)
            structured = SimpleNamespace(grammar=grammar, reasoning_ended=None)
            self.requests[f"r{i}"] = SimpleNamespace(
                request_id=f"r{i}", structured_output_request=structured
            )

    def step(self, timed: bool) -> np.ndarray:
        from grammar_guard.vllm_adapter.fill_hook import counters

        before = dict(counters.strategies)
        started = time.perf_counter()
        bitmask = self.function(self.manager, self.requests, list(self.requests), {})
        elapsed = time.perf_counter() - started
        if timed:
            self.times.append(elapsed)
            for strategy, count in counters.strategies.items():
                self.strategies[strategy.value] += count - before.get(strategy, 0)
        # A copy: the array is a view of the manager's buffer, which its next step overwrites.
        return np.array(bitmask[: len(self.requests)])

    def median_us(self) -> float:
        return statistics.median(self.times) * 1e6

    def rows_per_second(self) -> float:
        return len(self.requests) / statistics.median(self.times)

    def strategy(self) -> str:
        """The filler's most used strategy; `direct` if it never ran: vLLM's loop filled rows."""
        used = +self.strategies  # strategies counted at zero calls are not used
        return used.most_common(1)[0][0] if used else "direct"

    def engine_rows(self) -> str:
        """Rows per engine, and apart those that also record their path for an upgrade trial."""
        rows = " / ".join(str(self.engines[engine]) for engine in ("xgrammar", "llguidance"))
        recorded = [f"{n} {engine} {RECORDED}" for engine, n in sorted(self.recorded.items()) if n]
        return rows + (f" ({', '.join(recorded)})" if recorded else "")


def make_sides(tokenizer: Any, max_rows: int) -> list[Side]:
    """vLLM's xgrammar and guidance backends, grammar-guard forced onto xgrammar and routed."""
    import grammar_guard

    grammar_guard.register()
    from vllm.config.structured_outputs import StructuredOutputsConfig
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    hooked = StructuredOutputManager.grammar_bitmask
    original = hooked.__wrapped__  # type: ignore[attr-defined]

    def manager(cls: type, name: str, settings: Mapping[str, str]) -> Any:
        """``cls`` as vLLM builds its backend ``name``, with ``settings`` in the environment."""
        config = StructuredOutputsConfig(backend=name, disable_any_whitespace=True)
        # What the backends' constructors read of a VllmConfig.
        vllm_config = SimpleNamespace(
            structured_outputs_config=config, speculative_config=None, model_config=None
        )
        with scoped_environment(settings):
            return _manager(cls(vllm_config, tokenizer=tokenizer, vocab_size=VOCAB_SIZE), max_rows)

    def ours(engine: str) -> Any:
        settings = {"GRAMMAR_GUARD_ENGINE": engine, **OUR_SETTINGS}
        return manager(GrammarGuardBackend, grammar_guard.BACKEND_NAME, settings)

    return [
        Side(VLLM_XGRAMMAR, manager(XgrammarBackend, "xgrammar", {}), original, hooked=False),
        Side(VLLM_GUIDANCE, manager(GuidanceBackend, "guidance", {}), original, hooked=False),
        Side(GG_XGRAMMAR, ours("xgrammar"), hooked, hooked=True),
        Side(GG_ROUTED, ours("auto"), hooked, hooked=True),
    ]


def settle_routing(routed: Side, tokenizer: Any) -> None:
    """Ask routed grammar-guard for every schema twice, then wait for what that started.

    A key's second request may start a background compile on another engine: the tables are
    of the steady state after it.
    """
    for schema in (EASY_SCHEMA, HARD_SCHEMA):
        routed.load(tokenizer, [(schema, "")] * 2)
    if not routed.manager.backend.service.drain(DRAIN_TIMEOUT_S):
        raise RuntimeError(f"grammar-guard's compiles did not finish in {DRAIN_TIMEOUT_S} s")


def measure(sides: list[Side], tokenizer: Any, requests: list[Request], repeats: int) -> Masks:
    """Load every side, run them in turn ``repeats`` times; each step's masks by side."""
    for side in sides:
        side.load(tokenizer, requests)
    for _ in range(3):  # warm up, and let grammar-guard measure its first steps
        for side in sides:
            side.step(timed=False)
    masks: Masks = {side.name: [] for side in sides}
    for repeat in range(repeats):
        turn = sides[repeat % len(sides) :] + sides[: repeat % len(sides)]
        for side in turn:
            masks[side.name].append(side.step(timed=True))
    return masks


IDENTICAL, KEPT_OUT_ONLY, DIFFERENT = "identical", "kept-out tokens only", "differ"
FORCED, ROUTED = "grammar-guard on xgrammar", "grammar-guard routed"
# The goals hold from this batch up; below it a step is microseconds either way.
GOAL_FROM_BATCH = 8


def compare(masks: Masks, ours: str, theirs: str, kept_out: np.ndarray) -> str:
    """How ``ours``'s masks relate to ``theirs``'s over every step.

    ``KEPT_OUT_ONLY``: ours allow a subset of theirs, short of kept-out tokens
    alone (see ``vocabulary.py``), the one difference grammar-guard makes on purpose.
    """
    verdict = IDENTICAL
    for our_step, their_step in zip(masks[ours], masks[theirs], strict=True):
        width = min(our_step.shape[1], their_step.shape[1])  # guidance pads its rows
        a, b = our_step[:, :width], their_step[:, :width]
        if np.array_equal(a, b):
            continue
        if (a & ~b).any() or (b & ~a & ~kept_out[:width]).any():
            return DIFFERENT
        verdict = KEPT_OUT_ONLY
    return verdict


@dataclass
class Tables:
    forced: list[str] = field(default_factory=list)
    routed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # Per table: (rows, batch, vLLM's time over grammar-guard's) for the goal lines.
    speedups: dict[str, list[tuple[str, int, float]]] = field(default_factory=dict)

    def timed(self, table: str, rows: str, size: int, vllm_us: float, ours_us: float) -> str:
        """The speed-up cell of a row, recorded for the goals."""
        self.speedups.setdefault(table, []).append((rows, size, vllm_us / ours_us))
        return f"{vllm_us / ours_us:.2f}x"

    def add(
        self, sides: list[Side], masks: Masks, kept_out: np.ndarray, rows: str, size: int
    ) -> None:
        """One row of each table: ``rows`` (a workload's name) at batch ``size``."""
        label = f"{rows} | {size}"
        vllm_x, vllm_g, forced, routed = sides
        verdict = compare(masks, GG_XGRAMMAR, VLLM_XGRAMMAR, kept_out)
        if verdict == DIFFERENT:
            self.failures.append(f"{label}: grammar-guard on xgrammar filled other masks")
        x_us, g_us = vllm_x.median_us(), vllm_g.median_us()
        self.forced.append(
            f"| {label} | {x_us:.1f} | {forced.median_us():.1f} "
            f"| {vllm_x.rows_per_second():,.0f} | {forced.rows_per_second():,.0f} "
            f"| {self.timed(FORCED, rows, size, x_us, forced.median_us())} "
            f"| {verdict} | {forced.strategy()} |"
        )
        against = " / ".join(
            compare(masks, GG_ROUTED, theirs, kept_out) for theirs in (VLLM_XGRAMMAR, VLLM_GUIDANCE)
        )
        self.routed.append(
            f"| {label} | {x_us:.1f} | {g_us:.1f} | {routed.median_us():.1f} "
            f"| {self.timed(ROUTED, rows, size, min(x_us, g_us), routed.median_us())} "
            f"| {routed.engine_rows()} | {against} | {routed.strategy()} |"
        )


def run(sizes: Sequence[int], repeats: int) -> Tables:
    tokenizer = model_tokenizer()
    sides = make_sides(tokenizer, max(sizes))
    from grammar_guard.core.masks.layout import words_per_row

    kept_out = as_bitmask_row(kept_out_of_strings(tokenizer, VOCAB_SIZE), words_per_row(VOCAB_SIZE))
    tables = Tables()
    try:
        settle_routing(sides[-1], tokenizer)
        for name, requests in WORKLOADS.items():
            for size in sizes:
                masks = measure(sides, tokenizer, requests(size), repeats)
                tables.add(sides, masks, kept_out, name, size)
    finally:
        for side in sides:
            if side.hooked:  # grammar-guard's backends: their compile services stop
                side.manager.backend.destroy()
    return tables


def markdown(tables: Tables, repeats: int) -> str:
    lines = [
        f"Fill time per step, 129,280-token vocabulary, median of {repeats} steps "
        f"({date.today().isoformat()}). Masks: `{IDENTICAL}`; `{KEPT_OUT_ONLY}`, a subset short "
        "of the special and control-character tokens grammar-guard keeps out of strings and "
        f"vLLM's xgrammar lets into length-bounded ones; `{DIFFERENT}`, another language.",
        "",
        "grammar-guard forced onto xgrammar against vLLM's xgrammar backend (masks checked at "
        f"every step; `{DIFFERENT}` fails the run):",
        "",
        "| grammars | batch | vLLM xgrammar (us) | grammar-guard, xgrammar (us) "
        "| vLLM xgrammar (rows/s) | grammar-guard, xgrammar (rows/s) | grammar-guard / vLLM "
        "| masks | strategy |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
        *tables.forced,
        "",
        "grammar-guard routed (the default, after its background compiles), against both "
        "vLLM backends (masks compared, not required to match):",
        "",
        "| grammars | batch | vLLM xgrammar (us) | vLLM guidance (us) | grammar-guard (us) "
        "| vs faster vLLM | rows on xgrammar / llguidance | masks vs xgrammar / guidance "
        "| strategy |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
        *tables.routed,
        "",
        f"Goal, from batch {GOAL_FROM_BATCH} up: never slower than vLLM's xgrammar backend "
        "(grammar-guard on xgrammar) or than the faster vLLM backend (routed):",
        "",
        *(_goal(table, rows) for table, rows in tables.speedups.items()),
    ]
    return "\n".join(lines) + "\n"


def _goal(table: str, rows: list[tuple[str, int, float]]) -> str:
    judged = [(name, size, speedup) for name, size, speedup in rows if size >= GOAL_FROM_BATCH]
    if not judged:
        return f"- {table}: no batch of {GOAL_FROM_BATCH} or more measured"
    slower = [f"{name} at {size} ({speedup:.3f}x)" for name, size, speedup in judged if speedup < 1]
    return f"- {table}: " + (f"not met for {', '.join(slower)}" if slower else "met")


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    args = parser.parse_args()
    tables = run(args.batch_sizes, args.repeats)
    cli.publish(markdown(tables, args.repeats), args.markdown)
    if tables.failures:
        raise SystemExit("masks differ where they must not:\n" + "\n".join(tables.failures))


if __name__ == "__main__":
    main()
