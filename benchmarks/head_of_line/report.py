"""The head-of-line benchmark's figures: samples in; summaries, tables and the run's record out."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Container
from datetime import date
from typing import Any

from benchmarks.head_of_line.run import Calibration, Results, Sample
from benchmarks.head_of_line.workload import ALONE, LOADED, SIMPLE, Kind, Workload

GOAL_BACKEND = "grammar-guard"
P99_GOAL = 1.5  # how much the slow schemas may move the simple requests' p99
QUEUED_STEPS = 2.0  # a cache hit waiting longer than this many steps was queued
Summary = dict[str, dict[str, Any]]


def quantile(values: list[float], q: int) -> float:
    """The q-th percentile, interpolated between samples; NaN without samples."""
    if len(values) < 2:
        return values[0] if values else math.nan
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summarize(samples: list[Sample]) -> dict[str, Any]:
    """p50 and p99 of each part of the TTFT; a request that failed has no figures."""
    parts = {
        part: [value for sample in samples if (value := getattr(sample, f"{part}_s")) is not None]
        for part in ("ttft", "wait", "step", "other")
    }
    failed = len(samples) - len(parts["ttft"])
    figures: dict[str, Any] = {"requests": len(samples), "failed": failed}
    for part, values in parts.items():
        figures[f"{part}_p50_s"] = quantile(values, 50)
        figures[f"{part}_p99_s"] = quantile(values, 99)
    figures["ttft_max_s"] = max(parts["ttft"], default=math.nan)
    figures["send_lag_max_s"] = max((sample.send_lag_s for sample in samples), default=0.0)
    return figures


def _of_kinds(samples: list[Sample], kinds: Container[str]) -> list[Sample]:
    return [sample for sample in samples if sample.kind in kinds]


def summaries(results: Results) -> Summary:
    """Per backend: the simple stream per block and per kind, the slow requests, the ratios."""
    table: Summary = {}
    for backend, blocks in results.items():
        simple = {block: summarize(_of_kinds(samples, SIMPLE)) for block, samples in blocks.items()}
        table[backend] = {
            "simple": simple,
            "simple_by_kind": {
                block: {kind: summarize(_of_kinds(samples, {kind})) for kind in sorted(SIMPLE)}
                for block, samples in blocks.items()
            },
            "slow": summarize(_of_kinds(blocks[LOADED], {Kind.SLOW.value})),
            "p50_ratio": simple[LOADED]["ttft_p50_s"] / simple[ALONE]["ttft_p50_s"],
            "p99_ratio": simple[LOADED]["ttft_p99_s"] / simple[ALONE]["ttft_p99_s"],
        }
    return table


def goal_line(table: Summary, rate_per_s: float) -> str | None:
    """Default grammar-guard's verdict, and whether the run could test it at all."""
    row = table.get(GOAL_BACKEND)
    if row is None:
        return None
    ratio = row["p99_ratio"]
    line = (
        f"Goal, the slow schemas move {GOAL_BACKEND}'s p99 by at most {P99_GOAL:.1f}x: "
        f"{ratio:.2f}x, {'met' if ratio <= P99_GOAL else 'not met'}."
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


def headline_table(table: Summary) -> str:
    lines = [
        "| backend | p50 alone (ms) | p99 alone (ms) | p50 with slow (ms) | p99 with slow (ms) "
        "| p50 ratio | p99 ratio | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, row in table.items():
        alone, loaded = row["simple"][ALONE], row["simple"][LOADED]
        lines.append(
            f"| {backend} | {_ms(alone['ttft_p50_s'])} | {_ms(alone['ttft_p99_s'])} "
            f"| {_ms(loaded['ttft_p50_s'])} | {_ms(loaded['ttft_p99_s'])} "
            f"| {row['p50_ratio']:.2f}x | {row['p99_ratio']:.2f}x "
            f"| {alone['failed'] + loaded['failed']} |"
        )
    return "\n".join(lines)


def breakdown_table(table: Summary) -> str:
    """Where each kind's TTFT goes: waiting to be scheduled, the first step, the rest."""
    lines = [
        "| backend | block | requests | TTFT p50 | TTFT p99 | wait p99 | step p99 | other p99 |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for backend, row in table.items():
        rows = [
            (block, kind, figures)
            for block, kinds in row["simple_by_kind"].items()
            for kind, figures in kinds.items()
        ]
        for block, kind, figures in [*rows, (LOADED, "slow", row["slow"])]:
            lines.append(
                f"| {backend} | {block} | {kind} ({figures['requests']}) "
                f"| {_ms(figures['ttft_p50_s'])} | {_ms(figures['ttft_p99_s'])} "
                f"| {_ms(figures['wait_p99_s'])} | {_ms(figures['step_p99_s'])} "
                f"| {_ms(figures['other_p99_s'])} |"
            )
    return "\n".join(lines)


def run_record(
    workload: Workload,
    calibration: Calibration | None,
    env: dict[str, str],
    results: Results,
    started: float,
    load: Any,
) -> dict[str, Any]:
    """What the JSON file holds: when and where it ran, the workload, the figures, every sample."""
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
                block: list(map(dataclasses.asdict, samples)) for block, samples in blocks.items()
            }
            for backend, blocks in results.items()
        },
    }


def caption(workload: Workload, report: dict[str, Any]) -> str:
    load, calibration = report["load_average"], report["calibration"]
    rate_source = (
        ""
        if calibration is None
        else f" (set by the run: {calibration['backend']} served bursts of "
        f"{calibration['burst_requests']} cache hits at "
        f"{calibration['served_per_s']:.1f} requests/s)"
    )
    return (
        f"Tiny model, {workload.rounds} x {workload.block_s:g} s per block, "
        f"{workload.rate_per_s:g} simple requests/s{rate_source}, "
        f"a slow schema every {workload.slow_every_s:g} s, {report['date']}, load average "
        f"{load['before'][0]:.1f} before, {load['after'][0]:.1f} after"
    )


def markdown(workload: Workload, report: dict[str, Any]) -> str:
    """What docs/benchmarks.md shows: the headline table and the slow requests' own wait."""
    slow = ", ".join(
        f"{backend} {row['slow']['ttft_p50_s']:.3g} s" for backend, row in report["summary"].items()
    )
    headline = headline_table(report["summary"])
    text = f"{caption(workload, report)}.\n\n{headline}\n\nSlow requests' TTFT p50: {slow}.\n"
    goal = goal_line(report["summary"], workload.rate_per_s)
    return text if goal is None else f"{text}\n{goal}\n"
