"""bench_end_to_end's measuring and reporting, on engines made up for the full plan.

The full run takes twenty minutes before it reports; a report that cannot
be written from its measurements loses all of them. Here the workers are
stand-ins that answer at once, so every turn of the full plan, quiet and
busy, goes through the real bookkeeping and report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import benchmarks.bench_end_to_end as e2e
import pytest
from benchmarks import cli

STEPS = 30
# Seconds per batch: vLLM xgrammar is the faster vLLM backend; grammar-guard
# on xgrammar, the same work, is 1.2x faster quiet (the ceiling's rate) and
# 2.1x busy; default grammar-guard's outputs are another's work.
QUIET_S = {
    e2e.NONE: 1.0,
    e2e.XGRAMMAR: 1.2,
    e2e.GUIDANCE: 1.5,
    e2e.GRAMMAR_GUARD: 0.6,
    e2e.GRAMMAR_GUARD_XGRAMMAR: 1.0,
}
BUSY_S = {**QUIET_S, e2e.XGRAMMAR: 2.1, e2e.GUIDANCE: 3.0, e2e.GRAMMAR_GUARD: 2.0}
TWIN_S = 1.0


class FakeWorker:
    def __init__(self, name: str, busy: dict[str, bool], tokens: int = 7) -> None:
        self.name = name
        self._busy = busy
        self.tokens = tokens

    def run(self, kind: str, size: int) -> dict[str, Any]:
        if kind == "twin":
            seconds = TWIN_S
        else:
            seconds = (BUSY_S if self._busy["now"] else QUIET_S)[self.name]
        return {"seconds": seconds, "token_ids": [[self.tokens] * STEPS] * size}


@pytest.fixture
def busy(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    state = {"now": False}

    @contextlib.contextmanager
    def spinning(count: int) -> Iterator[None]:
        assert count >= 1
        state["now"] = True
        yield
        state["now"] = False

    monkeypatch.setattr(e2e, "spinning", spinning)
    return state


def _report(workers: list[FakeWorker]) -> e2e.Report:
    return e2e.report(e2e.FULL, e2e.measure(workers, e2e.FULL))  # type: ignore[arg-type]


@pytest.fixture
def report(busy: dict[str, bool]) -> e2e.Report:
    return _report([FakeWorker(name, busy) for name in e2e.FULL.configurations])


def test_the_full_plan_reports_without_a_failure(report: e2e.Report) -> None:
    assert report.failures == []
    assert "Outputs changed" not in report.text


def test_the_ceiling_is_the_faster_vllm_backend_against_its_twin(report: e2e.Report) -> None:
    assert "Ceiling: xgrammar's own outputs" in report.text
    assert "run at 1.20x its constrained rate" in report.text


def test_the_busy_ceiling_is_measured_under_load_too(report: e2e.Report) -> None:
    assert "Ceiling with every core busy: xgrammar's own outputs" in report.text
    assert "run at 2.10x its constrained rate" in report.text


def test_each_throughput_goal_is_judged_on_equal_work(report: e2e.Report) -> None:
    assert (
        "- quiet: 1.20x, goal at least 1.5x: not met, and beyond the ceiling (1.20x): "
        "no backend producing these tokens can reach it on this machine" in report.text
    )
    assert "- busy: 2.10x, goal at least 1.1x: met" in report.text


def test_a_goal_under_the_ceiling_is_grammar_guards_gap(
    busy: dict[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(BUSY_S, e2e.GRAMMAR_GUARD_XGRAMMAR, 2.0)
    text = _report([FakeWorker(name, busy) for name in e2e.FULL.configurations]).text
    assert (
        "- busy: 1.05x, goal at least 1.1x: not met, under the ceiling (2.10x): "
        "the gap is grammar-guard's" in text
    )


def test_default_grammar_guards_rate_of_other_outputs_judges_nothing(
    busy: dict[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Far faster, on other tokens: the verdicts stay those of equal work.
    monkeypatch.setitem(QUIET_S, e2e.GRAMMAR_GUARD, 0.1)
    workers = [
        FakeWorker(name, busy, tokens=9 if name == e2e.GRAMMAR_GUARD else 7)
        for name in e2e.FULL.configurations
    ]
    text = _report(workers).text
    assert "- quiet: 1.20x, goal at least 1.5x: not met" in text


def test_unequal_work_gets_no_throughput_verdict() -> None:
    same = e2e.Agreement(identical=60, total=64, explained=1)
    line = e2e.throughput_verdict("busy", 1.3, 1.1, 1.5, same)
    assert line == "- busy: not judged, 3 of 64 requests differ: not the same work"
    kept_out_only = e2e.Agreement(identical=63, total=64, explained=1)
    line = e2e.throughput_verdict("busy", 1.07, 1.1, 1.12, kept_out_only)
    assert line.startswith("- busy: 1.07x (1 requests differ at a kept-out token), goal")
    assert line.endswith("not met, under the ceiling (1.12x): the gap is grammar-guard's")


def test_a_step_ratio_below_one_is_noise_not_a_goal_met() -> None:
    verdict = e2e.step_verdict({1: 0.96, 8: 1.0, 32: 1.06, 64: 0.92})
    assert verdict == (
        "not met at batch 32 (1.06x); met at batch 8 (1.00x); "
        "within noise at batch 1 (0.96x), batch 64 (0.92x)"
    )
    assert e2e.step_verdict({1: 1.02}) == "met at batch 1 (1.02x)"


def test_every_constrained_backend_gets_a_step_verdict(report: e2e.Report) -> None:
    assert "- xgrammar: not met at batch 1 (1.20x)" in report.text
    assert "- grammar-guard: within noise at batch 1 (0.60x)" in report.text
    assert "- grammar-guard-xgrammar: met at batch 1 (1.00x)" in report.text


def test_a_busy_output_unlike_the_quiet_one_is_reported(busy: dict[str, bool]) -> None:
    class ChangesWhenBusy(FakeWorker):
        def run(self, kind: str, size: int) -> dict[str, Any]:
            self.tokens = 8 if self._busy["now"] else 7
            return super().run(kind, size)

    names = e2e.FULL.configurations
    workers = [(ChangesWhenBusy if n == e2e.GUIDANCE else FakeWorker)(n, busy) for n in names]
    changed = "Outputs changed from one run to the next: guidance at batch"
    assert f"{changed} {e2e.FULL.throughput_batch} (busy)" in _report(workers).text


def test_the_busy_verdict_is_the_median_batch_not_a_lucky_one(busy: dict[str, bool]) -> None:
    class LuckyOnceWhenBusy(FakeWorker):
        """One busy batch runs while the spinners happen to leave the cores alone."""

        busy_batches = 0

        def run(self, kind: str, size: int) -> dict[str, Any]:
            result = super().run(kind, size)
            if self._busy["now"] and kind == "batch":
                self.busy_batches += 1
                result["seconds"] = 0.5 if self.busy_batches == 1 else 3.0
            return result

    workers = [
        (LuckyOnceWhenBusy if name == e2e.GRAMMAR_GUARD_XGRAMMAR else FakeWorker)(name, busy)
        for name in e2e.FULL.configurations
    ]
    text = _report(workers).text
    assert workers[e2e.FULL.configurations.index(e2e.GRAMMAR_GUARD_XGRAMMAR)].busy_batches == 7
    assert "- busy: 0.70x, goal at least 1.1x: not met" in text
    assert "median of 7 batches" in text


def test_the_report_names_the_environment_its_engines_ran_with(busy: dict[str, bool]) -> None:
    plan = dataclasses.replace(e2e.FULL, env=(("OMP_WAIT_POLICY", "ACTIVE"),))
    workers = [FakeWorker(name, busy) for name in plan.configurations]
    text = e2e.report(plan, e2e.measure(workers, plan)).text  # type: ignore[arg-type]
    assert "), OMP_WAIT_POLICY=ACTIVE." in text.splitlines()[0]


def test_an_environment_item_is_name_equals_value() -> None:
    assert cli.env_pair("OMP_WAIT_POLICY=ACTIVE") == ("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.env_pair("EMPTY=") == ("EMPTY", "")
    for bad in ("OMP_WAIT_POLICY", "=ACTIVE"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.env_pair(bad)
