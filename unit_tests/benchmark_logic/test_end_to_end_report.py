"""bench_end_to_end's measuring and reporting, on engines made up for the full plan.

The full run takes twenty minutes before it reports; a report that cannot
be written from its measurements loses all of them. Here the workers are
stand-ins that answer at once, so every turn of the full plan goes through
the real bookkeeping and report.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import benchmarks.bench_end_to_end as e2e
import pytest
from benchmarks import cli

STEPS = 30
# Seconds per batch: vLLM xgrammar is the faster vLLM backend; grammar-guard
# on xgrammar, the same work, is 1.2x faster (the ceiling's rate); default
# grammar-guard's outputs are another's work.
SECONDS = {
    e2e.NONE: 1.0,
    e2e.XGRAMMAR: 1.2,
    e2e.GUIDANCE: 1.5,
    e2e.GRAMMAR_GUARD: 0.6,
    e2e.GRAMMAR_GUARD_XGRAMMAR: 1.0,
}
TWIN_S = 1.0


class FakeWorker:
    def __init__(self, name: str, tokens: int = 7) -> None:
        self.name = name
        self.tokens = tokens

    def run(self, kind: str, size: int) -> dict[str, Any]:
        seconds = TWIN_S if kind == "twin" else SECONDS[self.name]
        return {"seconds": seconds, "token_ids": [[self.tokens] * STEPS] * size}


def _report(workers: list[FakeWorker], plan: e2e.Plan = e2e.FULL) -> e2e.Report:
    return e2e.report(plan, e2e.measure(workers, plan))  # type: ignore[arg-type]


@pytest.fixture
def report() -> e2e.Report:
    return _report([FakeWorker(name) for name in e2e.FULL.configurations])


def test_the_full_plan_reports_without_a_failure(report: e2e.Report) -> None:
    assert report.failures == []
    assert "Outputs changed" not in report.text


def test_the_ceiling_is_the_faster_vllm_backend_against_its_twin(report: e2e.Report) -> None:
    assert "Ceiling: xgrammar's own outputs" in report.text
    assert "run at 1.20x its constrained rate" in report.text


def test_the_throughput_goal_is_judged_on_equal_work(report: e2e.Report) -> None:
    assert (
        "- quiet: 1.20x, goal at least 1.5x: not met, and beyond the ceiling (1.20x): "
        "no backend producing these tokens can reach it on this machine" in report.text
    )


def test_a_goal_under_the_ceiling_is_grammar_guards_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SECONDS, e2e.XGRAMMAR, 1.8)
    monkeypatch.setitem(SECONDS, e2e.GRAMMAR_GUARD_XGRAMMAR, 1.5)
    text = _report([FakeWorker(name) for name in e2e.FULL.configurations]).text
    assert (
        "- quiet: 1.20x, goal at least 1.5x: not met, under the ceiling (1.80x): "
        "the gap is grammar-guard's" in text
    )


def test_default_grammar_guards_rate_of_other_outputs_judges_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Far faster, on other tokens: the verdict stays that of equal work.
    monkeypatch.setitem(SECONDS, e2e.GRAMMAR_GUARD, 0.1)
    workers = [
        FakeWorker(name, tokens=9 if name == e2e.GRAMMAR_GUARD else 7)
        for name in e2e.FULL.configurations
    ]
    assert "- quiet: 1.20x, goal at least 1.5x: not met" in _report(workers).text


def test_unequal_work_gets_no_throughput_verdict() -> None:
    same = e2e.Agreement(identical=60, total=64, explained=1)
    line = e2e.throughput_verdict(1.3, 1.6, same)
    assert line == "- quiet: not judged, 3 of 64 requests differ: not the same work"
    kept_out_only = e2e.Agreement(identical=63, total=64, explained=1)
    line = e2e.throughput_verdict(1.3, 1.6, kept_out_only)
    assert line.startswith("- quiet: 1.30x (1 requests differ at a kept-out token), goal")
    assert line.endswith("not met, under the ceiling (1.60x): the gap is grammar-guard's")


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


def test_each_twin_is_checked_against_its_engines_last_batch() -> None:
    class EngineLike(FakeWorker):
        """Each batch one token longer than the last; a twin repeats the last one's lengths."""

        def __init__(self, name: str) -> None:
            super().__init__(name)
            self.lengths: dict[int, int] = {}

        def run(self, kind: str, size: int) -> dict[str, Any]:
            if kind == "batch":
                self.lengths[size] = self.lengths.get(size, STEPS) + 1
            result = super().run(kind, size)
            return {**result, "token_ids": [[self.tokens] * self.lengths[size]] * size}

    # Odd turns time the twin first: it must be held to the batch of the turn before.
    text = _report([EngineLike(name) for name in e2e.FULL.configurations]).text
    assert f"| grammar-guard | 64 | {STEPS + e2e.FULL.runs} |" in text
    assert "twin lengths wrong" not in text


def test_an_output_that_changes_between_runs_is_reported() -> None:
    class ChangesOnce(FakeWorker):
        def run(self, kind: str, size: int) -> dict[str, Any]:
            result = super().run(kind, size)
            self.tokens = 8 if kind == "batch" else self.tokens
            return result

    workers = [
        (ChangesOnce if n == e2e.GUIDANCE else FakeWorker)(n) for n in e2e.FULL.configurations
    ]
    changed = "Outputs changed from one run to the next: guidance at batch 1"
    assert changed in _report(workers).text


def test_the_report_names_the_environment_its_engines_ran_with() -> None:
    plan = dataclasses.replace(e2e.FULL, env=(("OMP_WAIT_POLICY", "ACTIVE"),))
    text = _report([FakeWorker(name) for name in plan.configurations], plan).text
    assert "), OMP_WAIT_POLICY=ACTIVE." in text.splitlines()[0]


def test_an_environment_item_is_name_equals_value() -> None:
    assert cli.env_pair("OMP_WAIT_POLICY=ACTIVE") == ("OMP_WAIT_POLICY", "ACTIVE")
    assert cli.env_pair("EMPTY=") == ("EMPTY", "")
    for bad in ("OMP_WAIT_POLICY", "=ACTIVE"):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.env_pair(bad)
