"""Bitmask fill time per engine step: vLLM's xgrammar and guidance backends against grammar-guard.

Every side runs the installed vLLM's real ``StructuredOutputManager.grammar_bitmask``
in one process on the 129k-token tokenizer, the sides taking turns step by
step; docs/benchmarks.md ("Bitmask fill") describes the three tables and their
goal. grammar-guard on xgrammar must fill vLLM xgrammar's masks short of
kept-out tokens (``vocabulary.py``), or the run fails.

    .venv/bin/python -m benchmarks.bench_fill [--repeats 15] [--batch-sizes 1 8 32 128]
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
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

Request = tuple[dict[str, Any], str]
VLLM_XGRAMMAR, VLLM_GUIDANCE = "vLLM xgrammar", "vLLM guidance"
GG_XGRAMMAR, GG_ROUTED = "grammar-guard, xgrammar", "grammar-guard"
GG_MIXED = "grammar-guard, mixed"
ENGINE_OF_MATCHER = {"XGrammarMatcher": "xgrammar", "LLGuidanceMatcher": "llguidance"}
RECORDED = "recorded for an upgrade trial"  # rows whose matcher also records its path


@dataclass(frozen=True)
class Workload:
    name: str
    requests: Callable[[int], list[Request]]


def _cycle(schema: dict[str, Any], prefixes: Sequence[str]) -> Callable[[int], list[Request]]:
    return lambda n: [(schema, prefixes[i % len(prefixes)]) for i in range(n)]


def _one_hard(n: int) -> list[Request]:
    """One request inside a long string, the rest simple: a common serving mix."""
    return [(HARD_SCHEMA, HARD_PREFIXES[1]), *_cycle(EASY_SCHEMA, EASY_PREFIXES)(n)[1:]]


def _alternating(n: int) -> list[Request]:
    """Even rows inside a long string, odd rows simple: half the step on each engine."""
    easy, hard = _cycle(EASY_SCHEMA, EASY_PREFIXES)(n), _cycle(HARD_SCHEMA, HARD_PREFIXES)(n)
    return [hard[i] if i % 2 == 0 else easy[i] for i in range(n)]


WORKLOADS = (
    Workload("easy", _cycle(EASY_SCHEMA, EASY_PREFIXES)),
    Workload("hard", _cycle(HARD_SCHEMA, HARD_PREFIXES)),
    Workload("1 hard + easy", _one_hard),
)
MIXED = Workload("half hard (llguidance) + half easy (xgrammar)", _alternating)


def _backend_config(backend: str) -> Any:
    """What the backends' constructors read of a VllmConfig."""
    from vllm.config.structured_outputs import StructuredOutputsConfig

    return SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(
            backend=backend, disable_any_whitespace=True
        ),
        speculative_config=None,
        model_config=None,
    )


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


def _grammar_guard(tokenizer: Any, engine: str) -> Any:
    from grammar_guard import BACKEND_NAME
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    # Compiles in threads: this measures fills, and worker processes would
    # only add their start-up to the run.
    settings = {
        "GRAMMAR_GUARD_ENGINE": engine,
        "GRAMMAR_GUARD_COMPILE_ISOLATION": "thread",
        **CLOSED_OBJECTS,
    }
    with scoped_environment(settings):
        return GrammarGuardBackend(
            _backend_config(BACKEND_NAME), tokenizer=tokenizer, vocab_size=VOCAB_SIZE
        )


@dataclass
class Side:
    """One way of filling a step: a manager, its grammar_bitmask, where its grammars come from."""

    name: str
    manager: Any
    function: Callable[..., Any]
    backend_for: Callable[[dict[str, Any]], Any]  # the backend that compiles a schema
    hooked: bool  # grammar-guard's fill hook runs (it counts the strategies it used)
    requests: dict[str, Any] = field(default_factory=dict)
    engines: Counter[str] = field(default_factory=Counter)  # rows per engine, grammar-guard only
    times: list[float] = field(default_factory=list)
    strategies: Counter[str] = field(default_factory=Counter)

    def load(self, tokenizer: Any, requests: list[Request]) -> None:
        from vllm.v1.structured_output.backend_types import StructuredOutputOptions

        self.requests, self.engines = {}, Counter()
        self.times, self.strategies = [], Counter()
        for i, (schema, prefix) in enumerate(requests):
            grammar = self.backend_for(schema).compile_grammar(
                StructuredOutputOptions.JSON, json.dumps(schema)
            )
            assert grammar.accept_tokens("r", tokenizer.encode(prefix, add_special_tokens=False))
            if self.hooked:
                engine, recorded = _engine_of(grammar.batch_matcher())
                self.engines[engine] += 1
                self.engines[f"{engine} {RECORDED}"] += recorded
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
        engines = ("xgrammar", "llguidance")
        shown = " / ".join(str(self.engines.get(e, 0)) for e in engines)
        others = [
            f"{n} {name}" for name, n in sorted(self.engines.items()) if n and name not in engines
        ]
        return shown + (f" ({', '.join(others)})" if others else "")


def _engine_of(matcher: Any) -> tuple[str, bool]:
    """The engine filling ``matcher``'s rows, and whether a wrapper records them (a trial's)."""
    inner = getattr(matcher, "inner", None)
    if inner is not None:
        return _engine_of(inner)[0], True
    name = type(matcher).__name__
    return ENGINE_OF_MATCHER.get(name, name), False


class Sides:
    """Every backend of the run, and the sides built on them."""

    def __init__(self, tokenizer: Any, max_rows: int) -> None:
        import grammar_guard

        grammar_guard.register()
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.v1.structured_output.backend_guidance import GuidanceBackend
        from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

        hooked = StructuredOutputManager.grammar_bitmask
        original = hooked.__wrapped__  # type: ignore[attr-defined]
        vllm_x = XgrammarBackend(
            _backend_config("xgrammar"), tokenizer=tokenizer, vocab_size=VOCAB_SIZE
        )
        vllm_g = GuidanceBackend(
            _backend_config("guidance"), tokenizer=tokenizer, vocab_size=VOCAB_SIZE
        )
        self.ours = {
            engine: _grammar_guard(tokenizer, engine)
            for engine in ("xgrammar", "llguidance", "auto")
        }
        ours_x, ours_ll, routed = self.ours["xgrammar"], self.ours["llguidance"], self.ours["auto"]

        def side(name: str, backend: Any, function: Any, pick: Any = None) -> Side:
            manager, hook = _manager(backend, max_rows), function is hooked
            return Side(name, manager, function, pick or (lambda _: backend), hook)

        def by_engine(schema: dict[str, Any]) -> Any:
            return ours_ll if schema is HARD_SCHEMA else ours_x

        self.vllm = [side(VLLM_XGRAMMAR, vllm_x, original), side(VLLM_GUIDANCE, vllm_g, original)]
        self.forced = side(GG_XGRAMMAR, ours_x, hooked)
        self.routed = side(GG_ROUTED, routed, hooked)
        self.mixed = side(GG_MIXED, ours_x, hooked, by_engine)
        self._tokenizer = tokenizer

    def settle_routing(self) -> None:
        """Ask routed grammar-guard for every schema twice, then wait for what that started.

        A key's second request may start a background compile on another
        engine; the tables are of the steady state after it.
        """
        for schema in (EASY_SCHEMA, HARD_SCHEMA):
            self.routed.load(self._tokenizer, [(schema, "")] * 2)
        service = getattr(self.routed.manager.backend, "service", None)
        if service is not None and not service.drain(DRAIN_TIMEOUT_S):
            raise RuntimeError(f"grammar-guard's compiles did not finish in {DRAIN_TIMEOUT_S} s")

    def close(self) -> None:
        for backend in self.ours.values():
            backend.destroy()


def measure(sides: list[Side], tokenizer: Any, requests: list[Request], repeats: int) -> dict:
    """Load every side, run them in turn ``repeats`` times; each step's masks by side."""
    for side in sides:
        side.load(tokenizer, requests)
    for _ in range(3):  # warm up, and let grammar-guard measure its first steps
        for side in sides:
            side.step(timed=False)
    masks: dict[str, list[np.ndarray]] = {side.name: [] for side in sides}
    for repeat in range(repeats):
        turn = sides[repeat % len(sides) :] + sides[: repeat % len(sides)]
        for side in turn:
            masks[side.name].append(side.step(timed=True))
    return masks


IDENTICAL, KEPT_OUT_ONLY, DIFFERENT = "identical", "kept-out tokens only", "differ"
FORCED, ROUTED, MIXED_TABLE = "grammar-guard on xgrammar", "grammar-guard routed", "mixed engines"
# The goals hold from this batch up; below it a step is microseconds either way.
GOAL_FROM_BATCH = 8


def compare(
    masks: dict[str, list[np.ndarray]],
    ours: str,
    theirs: str,
    kept_out: np.ndarray,
    rows: Sequence[int] | None = None,
) -> str:
    """How ``ours``'s masks in ``rows`` (None: all) relate to ``theirs``'s over every step.

    ``KEPT_OUT_ONLY``: ours allow a subset of theirs, short of kept-out tokens
    alone (see ``vocabulary.py``), the one difference grammar-guard makes on purpose.
    """
    verdict = IDENTICAL
    chosen = slice(None) if rows is None else list(rows)
    for our_step, their_step in zip(masks[ours], masks[theirs], strict=True):
        width = min(our_step.shape[1], their_step.shape[1])  # guidance pads its rows
        a, b = our_step[chosen, :width], their_step[chosen, :width]
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
    mixed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # Per table: (rows, batch, vLLM's time over grammar-guard's) for the goal lines.
    speedups: dict[str, list[tuple[str, int, float]]] = field(default_factory=dict)

    def timed(self, table: str, rows: str, size: int, vllm_us: float, ours_us: float) -> str:
        """The speed-up cell of a row, recorded for the goals."""
        self.speedups.setdefault(table, []).append((rows, size, vllm_us / ours_us))
        return f"{vllm_us / ours_us:.2f}x"

    def versus(self, table: str, rows: str, size: int, theirs: Side, ours: Side) -> str:
        """Both sides' median step time and rows per second, and the ratio (recorded)."""
        return (
            f"{theirs.median_us():.1f} | {ours.median_us():.1f} "
            f"| {theirs.rows_per_second():,.0f} | {ours.rows_per_second():,.0f} "
            f"| {self.timed(table, rows, size, theirs.median_us(), ours.median_us())}"
        )


def run(sizes: Sequence[int], repeats: int) -> Tables:
    tokenizer = model_tokenizer()
    sides = Sides(tokenizer, max(sizes))
    from grammar_guard.core.masks.layout import words_per_row

    kept_out = as_bitmask_row(kept_out_of_strings(tokenizer, VOCAB_SIZE), words_per_row(VOCAB_SIZE))
    tables = Tables()
    vllm_x, vllm_g = sides.vllm
    forced, routed, mixed = sides.forced, sides.routed, sides.mixed
    try:
        sides.settle_routing()
        for workload in WORKLOADS:
            for size in sizes:
                sides_here = [vllm_x, vllm_g, forced, routed]
                masks = measure(sides_here, tokenizer, workload.requests(size), repeats)
                label = f"{workload.name} | {size}"
                forced_verdict = compare(masks, GG_XGRAMMAR, VLLM_XGRAMMAR, kept_out)
                if forced_verdict == DIFFERENT:
                    tables.failures.append(f"{label}: grammar-guard on xgrammar filled other masks")
                x_us, g_us = vllm_x.median_us(), vllm_g.median_us()
                faster_us = min(x_us, g_us)
                tables.forced.append(
                    f"| {label} | {tables.versus(FORCED, workload.name, size, vllm_x, forced)} "
                    f"| {forced_verdict} | {forced.strategy()} |"
                )
                against = " / ".join(
                    compare(masks, GG_ROUTED, name, kept_out)
                    for name in (VLLM_XGRAMMAR, VLLM_GUIDANCE)
                )
                tables.routed.append(
                    f"| {label} | {x_us:.1f} | {g_us:.1f} | {routed.median_us():.1f} "
                    f"| {tables.timed(ROUTED, workload.name, size, faster_us, routed.median_us())} "
                    f"| {routed.engine_rows()} "
                    f"| {against} | {routed.strategy()} |"
                )
        for size in [size for size in sizes if size > 1]:
            masks = measure([vllm_x, vllm_g, mixed], tokenizer, MIXED.requests(size), repeats)
            xgrammar_rows, llguidance_rows = range(1, size, 2), range(0, size, 2)
            xgrammar_verdict = compare(masks, GG_MIXED, VLLM_XGRAMMAR, kept_out, xgrammar_rows)
            if xgrammar_verdict == DIFFERENT:
                tables.failures.append(f"mixed | {size}: the xgrammar rows differ from vLLM's")
            guidance_verdict = compare(masks, GG_MIXED, VLLM_GUIDANCE, kept_out, llguidance_rows)
            x_us, g_us = vllm_x.median_us(), vllm_g.median_us()
            tables.mixed.append(
                f"| {size} | {x_us:.1f} | {g_us:.1f} | {mixed.median_us():.1f} "
                f"| {tables.timed(MIXED_TABLE, 'mixed', size, min(x_us, g_us), mixed.median_us())} "
                f"| {mixed.engine_rows()} "
                f"| {xgrammar_verdict} / {guidance_verdict} | {mixed.strategy()} |"
            )
    finally:
        sides.close()
    return tables


# The cells of Tables.versus, vLLM's xgrammar backend against grammar-guard on xgrammar.
RATES = (
    "vLLM xgrammar (us) | grammar-guard, xgrammar (us) | vLLM xgrammar (rows/s) "
    "| grammar-guard, xgrammar (rows/s) | grammar-guard / vLLM"
)


def markdown(tables: Tables, repeats: int) -> str:
    masks_note = (
        f"Masks: `{IDENTICAL}`; `{KEPT_OUT_ONLY}`, a subset short of the special and "
        "control-character tokens grammar-guard keeps out of strings and vLLM's xgrammar "
        f"lets into length-bounded ones; `{DIFFERENT}`, another language."
    )
    lines = [
        f"Fill time per step, 129,280-token vocabulary, median of {repeats} steps "
        f"({date.today().isoformat()}). {masks_note}",
        "",
        "grammar-guard forced onto xgrammar against vLLM's xgrammar backend (masks checked at "
        f"every step; `{DIFFERENT}` fails the run):",
        "",
        f"| grammars | batch | {RATES} | masks | strategy |",
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
    ]
    if tables.mixed:
        lines += [
            "",
            f"Mixed engines in one step: {MIXED.name}, grammar-guard with each engine forced "
            "(its xgrammar rows checked against vLLM xgrammar's, its llguidance rows compared "
            "with vLLM guidance's):",
            "",
            "| batch | vLLM xgrammar (us) | vLLM guidance (us) | grammar-guard, mixed (us) "
            "| vs faster vLLM | rows on xgrammar / llguidance "
            "| masks: xgrammar rows / llguidance rows | strategy |",
            "|---:|---:|---:|---:|---:|---|---|---|",
            *tables.mixed,
        ]
    lines += [
        "",
        f"Goal, from batch {GOAL_FROM_BATCH} up: never slower than vLLM's xgrammar backend "
        "(grammar-guard on xgrammar) or than the faster vLLM backend "
        "(routed, mixed engines):",
        "",
    ]
    lines += [_goal(table, rows) for table, rows in tables.speedups.items()]
    return "\n".join(lines) + "\n"


def _goal(table: str, rows: list[tuple[str, int, float]]) -> str:
    slower = [
        f"{name} at {size} ({speedup:.3f}x)"
        for name, size, speedup in rows
        if size >= GOAL_FROM_BATCH and speedup < 1
    ]
    if not any(size >= GOAL_FROM_BATCH for _, size, _ in rows):
        return f"- {table}: no batch of {GOAL_FROM_BATCH} or more measured"
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
