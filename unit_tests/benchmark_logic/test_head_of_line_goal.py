"""The head-of-line benchmark's goal line: the verdict, and whether the run could test it.

A generated run on an engine that cannot serve the stream even without slow
requests measures queueing; its ratio must not read as a verdict on blocking.
"""

from __future__ import annotations

from benchmarks.head_of_line.report import goal_line, summaries
from benchmarks.head_of_line.run import Sample
from benchmarks.head_of_line.workload import ALONE, LOADED, Kind


def _hits(ttft_s: float, wait_s: float, step_s: float = 0.010) -> list[Sample]:
    return [
        Sample(Kind.REPEATED.value, 0, float(i), 0.0, ttft_s, wait_s, step_s, 8, "stop")
        for i in range(20)
    ]


def _line(alone_wait_s: float, loaded_ttft_s: float) -> str | None:
    blocks = {ALONE: _hits(0.020, alone_wait_s), LOADED: _hits(loaded_ttft_s, alone_wait_s)}
    return goal_line(summaries({"grammar-guard": blocks}), rate_per_s=8.0)


def test_a_run_the_engine_kept_up_with_gets_a_plain_verdict() -> None:
    assert _line(0.005, 0.025) == (
        "Goal, the slow schemas move grammar-guard's p99 by at most 1.5x: 1.25x, met."
    )
    assert _line(0.005, 0.040).endswith("2.00x, not met.")  # type: ignore[union-attr]


def test_an_engine_queueing_without_slow_requests_is_not_a_test() -> None:
    line = _line(0.150, 0.025)
    assert line is not None
    assert line.startswith("Goal, the slow schemas move grammar-guard's p99 by at most 1.5x: 1.25x")
    assert "Not a test of the goal: alone, its cache hits waited 150.0 ms at p99" in line
    assert "could not keep up with 8 requests/s; rerun with a lower --rate." in line


def test_a_run_without_grammar_guard_has_no_goal_line() -> None:
    blocks = {ALONE: _hits(0.020, 0.005), LOADED: _hits(0.025, 0.005)}
    assert goal_line(summaries({"xgrammar": blocks}), rate_per_s=8.0) is None
