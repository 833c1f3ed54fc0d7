"""The step breakdown's arithmetic, and its clocks leave vLLM as they found it."""

from __future__ import annotations

import pytest
from benchmarks.step_breakdown import clocks_on, parts_ms
from harness.skip_policy import UNAVAILABLE_HERE
from vllm.v1.core.sched.scheduler import Scheduler

# The breakdown times the V1 runner's apply; vLLM 0.34 has only V2 runners.
gpu_model_runner = pytest.importorskip(
    "vllm.v1.worker.gpu_model_runner",
    reason=UNAVAILABLE_HERE
    + "this vLLM has no V1 model runner, whose apply the step breakdown times",
)


def test_each_part_is_its_time_per_output_step_and_the_rest_is_what_no_part_holds() -> None:
    totals = {
        "step": 0.080, "forward": 0.040, "sample_tokens": 0.020, "apply": 0.005,
        "fill": 0.004, "schedule": 0.002, "update": 0.003, "step calls": 12.0,
    }  # fmt: skip
    parts = parts_ms(totals, wall_s=0.100, steps=10)
    assert parts["forward"] == pytest.approx(4.0)
    assert parts["sampling"] == pytest.approx(1.5)  # sample_tokens less the apply inside it
    assert parts["apply"] == pytest.approx(0.5)
    assert parts["scheduler"] == pytest.approx(0.5)
    assert parts["rest of step"] == pytest.approx(8.0 - 4.0 - 1.5 - 0.5 - 0.4 - 0.5)
    assert parts["outside steps"] == pytest.approx(2.0)
    assert parts["total"] == pytest.approx(10.0)
    assert parts["steps"] == 12


def test_the_clocks_count_calls_and_are_removed_afterwards() -> None:
    schedule, apply = Scheduler.schedule, gpu_model_runner.apply_grammar_bitmask
    with clocks_on() as totals:
        assert Scheduler.schedule is not schedule
        with pytest.raises(TypeError):
            gpu_model_runner.apply_grammar_bitmask()  # counted even when it raises
    assert totals["apply calls"] == 1 and totals["apply"] > 0
    assert Scheduler.schedule is schedule
    assert gpu_model_runner.apply_grammar_bitmask is apply
