"""Figures of ``bench_head_of_line.py``: per-request samples in, tables and a plot out."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from head_of_line_workload import Kind

ALONE, LOADED = "alone", "with slow"
BLOCKS = (ALONE, LOADED)
SIMPLE = frozenset({Kind.REPEATED.value, Kind.NEW_SMALL.value})
GOAL_BACKEND = "grammar-guard"
P99_GOAL = 1.5  # how much the slow schemas may move the simple requests' p99
QUEUED_STEPS = 2.0  # a cache hit waiting longer than this many steps was queued
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


def quantile(values: list[float], q: int) -> float:
    """The q-th percentile, interpolated between samples; NaN without samples."""
    if len(values) < 2:
        return values[0] if values else math.nan
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _present(values: list[float | None]) -> list[float]:
    return [value for value in values if value is not None]


def summarize(samples: list[Sample]) -> dict[str, Any]:
    ttfts = _present([sample.ttft_s for sample in samples])
    figures: dict[str, Any] = {"requests": len(samples), "failed": len(samples) - len(ttfts)}
    parts = {
        "ttft": ttfts,
        "wait": _present([sample.wait_s for sample in samples]),
        "step": _present([sample.step_s for sample in samples]),
        "other": _present([sample.other_s for sample in samples]),
    }
    for name, values in parts.items():
        figures[f"{name}_p50_s"] = quantile(values, 50)
        figures[f"{name}_p99_s"] = quantile(values, 99)
    figures["ttft_max_s"] = max(ttfts, default=math.nan)
    figures["send_lag_max_s"] = max((sample.send_lag_s for sample in samples), default=0.0)
    return figures


def _of(samples: list[Sample], kinds: frozenset[str]) -> list[Sample]:
    return [sample for sample in samples if sample.kind in kinds]


def summaries(results: Results) -> dict[str, dict[str, Any]]:
    """Per backend: the simple stream per block and per kind, the slow requests, the ratios."""
    table: dict[str, dict[str, Any]] = {}
    for backend, blocks in results.items():
        simple = {block: summarize(_of(samples, SIMPLE)) for block, samples in blocks.items()}
        by_kind = {
            block: {kind: summarize(_of(samples, frozenset({kind}))) for kind in sorted(SIMPLE)}
            for block, samples in blocks.items()
        }
        table[backend] = {
            "simple": simple,
            "simple_by_kind": by_kind,
            "slow": summarize(_of(blocks[LOADED], frozenset({Kind.SLOW.value}))),
            "p50_ratio": simple[LOADED]["ttft_p50_s"] / simple[ALONE]["ttft_p50_s"],
            "p99_ratio": simple[LOADED]["ttft_p99_s"] / simple[ALONE]["ttft_p99_s"],
        }
    return table


def goal_line(table: dict[str, dict[str, Any]], rate_per_s: float) -> str | None:
    """Default grammar-guard's verdict, and whether the run could test it at all."""
    row = table.get(GOAL_BACKEND)
    if row is None:
        return None
    ratio = row["p99_ratio"]
    verdict = "met" if ratio <= P99_GOAL else "not met"
    line = (
        f"Goal, the slow schemas move {GOAL_BACKEND}'s p99 by at most {P99_GOAL:.1f}x: "
        f"{ratio:.2f}x, {verdict}."
    )
    # A cache hit is scheduled in the step after it arrives; waiting several
    # steps means the queue grew without any slow request: the engine could
    # not serve the stream, and the ratio measures queueing, not blocking.
    hits = row["simple_by_kind"][ALONE][Kind.REPEATED.value]
    if hits["wait_p99_s"] > QUEUED_STEPS * hits["step_p99_s"]:
        line += (
            f" Not a test of the goal: alone, its cache hits waited {_ms(hits['wait_p99_s'])} ms "
            f"at p99 to be scheduled, more than {QUEUED_STEPS:g} engine steps "
            f"({_ms(hits['step_p99_s'])} ms at p99), so the engine could not keep up with "
            f"{rate_per_s:g} requests/s; rerun with a lower --rate."
        )
    return line


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def headline_table(table: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| backend | p50 alone (ms) | p99 alone (ms) | p50 with slow (ms) | p99 with slow (ms) "
        "| p50 ratio | p99 ratio | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, row in table.items():
        alone, loaded = row["simple"][ALONE], row["simple"][LOADED]
        failed = alone["failed"] + loaded["failed"]
        lines.append(
            f"| {backend} | {_ms(alone['ttft_p50_s'])} | {_ms(alone['ttft_p99_s'])} "
            f"| {_ms(loaded['ttft_p50_s'])} | {_ms(loaded['ttft_p99_s'])} "
            f"| {row['p50_ratio']:.2f}x | {row['p99_ratio']:.2f}x | {failed} |"
        )
    return "\n".join(lines)


def breakdown_table(table: dict[str, dict[str, Any]]) -> str:
    """Where each kind's TTFT goes: waiting to be scheduled, the first step, the rest."""
    lines = [
        "| backend | block | requests | TTFT p50 | TTFT p99 | wait p99 | step p99 | other p99 |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for backend, row in table.items():
        rows = [
            (block, f"{kind} ({figures['requests']})", figures)
            for block, kinds in row["simple_by_kind"].items()
            for kind, figures in kinds.items()
        ]
        slow = row["slow"]
        rows.append((LOADED, f"slow ({slow['requests']})", slow))
        for block, label, figures in rows:
            lines.append(
                f"| {backend} | {block} | {label} | {_ms(figures['ttft_p50_s'])} "
                f"| {_ms(figures['ttft_p99_s'])} | {_ms(figures['wait_p99_s'])} "
                f"| {_ms(figures['step_p99_s'])} | {_ms(figures['other_p99_s'])} |"
            )
    return "\n".join(lines)


def plot(results: Results, block_s: float, slow_times: list[float], path: Path) -> bool:
    """Left: the simple stream's TTFT distribution; right: its TTFT over the loaded blocks.

    False, and no file, without matplotlib: it is the ``bench`` extra, which
    the test environment (and so the smoke run in CI) does not install.
    """
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")  # no display on a benchmark machine
    import matplotlib.pyplot as plt

    figure, (cdf, timeline) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = dict(zip(results, ("tab:red", "tab:blue", "tab:green", "tab:orange"), strict=False))
    for backend, blocks in results.items():
        color = colors[backend]
        for block, style in zip(BLOCKS, (":", "-"), strict=True):
            ttfts = sorted(_present([s.ttft_s for s in _of(blocks[block], SIMPLE)]))
            shares = [(i + 1) / len(ttfts) for i in range(len(ttfts))]
            cdf.step(ttfts, shares, style, color=color, where="post", label=f"{backend}, {block}")
        for kind, marker in ((Kind.REPEATED.value, "o"), (Kind.NEW_SMALL.value, "x")):
            shown = [s for s in _of(blocks[LOADED], frozenset({kind})) if s.ttft_s is not None]
            timeline.scatter(
                [s.round * block_s + s.at_s for s in shown],
                [s.ttft_s for s in shown],
                s=5 if marker == "o" else 14,
                marker=marker,
                linewidths=0.8,
                color=color,
                label=f"{backend}, {kind}",
            )
    rounds = 1 + max((s.round for blocks in results.values() for s in blocks[LOADED]), default=0)
    for at in (r * block_s + t for r in range(rounds) for t in slow_times):
        timeline.axvline(at, color="grey", linewidth=0.6, alpha=0.6)
    for boundary in range(1, rounds):
        timeline.axvline(boundary * block_s, color="black", linewidth=0.8, linestyle="--")
    cdf.set(xscale="log", xlabel="TTFT of the simple requests (s)", ylabel="share of requests")
    cdf.set_title("TTFT distribution (dotted: alone; solid: with slow schemas)", fontsize=10)
    cdf.legend(fontsize=8)
    timeline.set(yscale="log", xlabel="due time in the loaded blocks, end to end (s)")
    timeline.set(ylabel="TTFT (s)")
    timeline.set_title(
        "with slow schemas (grey: a slow request is due; dashed: next round)", fontsize=10
    )
    shown = [s.ttft_s for b in results.values() for s in _of(b[LOADED], SIMPLE) if s.ttft_s]
    top = max(shown, default=1.0)
    timeline.set_ylim(top=top * 10)  # room for the legend above the highest point
    timeline.legend(fontsize=7, markerscale=2, ncol=2, loc="upper center")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
