"""The vLLM apply hook against vLLM's own function; the kernels it calls are tested in core.

The kernel property tests are unit_tests/core/masks/test_apply_kernels.py,
whose reference and helpers these tests use.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from harness.skip_policy import UNAVAILABLE_HERE, unavailable_here
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.structured_output import utils as vllm_utils

# The apply hook and vLLM's function it stands in for live in the V1 model
# runner, which vLLM 0.34 deleted: its V2 runners apply masks with vLLM's own
# code (checked in test_bitmask_fill.py).
pytest.importorskip(
    "vllm.v1.worker.gpu_model_runner",
    reason=UNAVAILABLE_HERE
    + "this vLLM has no V1 model runner, so nothing for the apply hook to replace",
)

from unit_tests.core.masks.test_apply_kernels import (
    DTYPES,
    assert_same,
    random_bitmask,
    random_logits,
)

from grammar_guard import BACKEND_NAME
from grammar_guard.vllm_adapter import apply_hook
from grammar_guard.vllm_adapter.compat import MaskLayout, installed_release

# The hook: vLLM's real dataclasses, a stand-in input batch. Seam tests: they
# also run against vLLM 0.33, whose mask gives each request a fixed block.

MAX_DRAFTS = 3


def hook_inputs(
    seed: int, num_reqs: int, vocab: int, dtype: torch.dtype
) -> tuple[SchedulerOutput, GrammarOutput, Any, torch.Tensor]:
    """A batch with drafts on some requests and grammars on others, in scheduler order."""
    rng = np.random.default_rng(seed)
    req_ids = [f"req-{i}" for i in rng.permutation(num_reqs)]
    drafts = {r: [0] * int(rng.integers(1, MAX_DRAFTS + 1)) for r in req_ids if rng.random() < 0.4}
    grammar_ids = [r for r in rng.permutation(req_ids) if rng.random() < 0.6]
    if not grammar_ids:
        grammar_ids = [req_ids[0]]
    scheduler_output = SchedulerOutput.make_empty()
    scheduler_output.scheduled_spec_decode_tokens = drafts
    rows_per_request = np.array([1 + len(drafts.get(r, ())) for r in grammar_ids])
    mask_rows = installed_release().mask_layout.total_rows(rows_per_request, 1 + MAX_DRAFTS)
    generator = torch.Generator().manual_seed(seed)
    bitmask = random_bitmask(generator, mask_rows, vocab, "words").numpy()
    grammar_output = GrammarOutput(grammar_ids, bitmask)
    input_batch = SimpleNamespace(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}
    )
    num_logits = num_reqs + sum(len(d) for d in drafts.values())
    logits = random_logits(generator, num_logits, vocab, dtype)
    return scheduler_output, grammar_output, input_batch, logits


@pytest.mark.seam
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed", range(6))
def test_hook_applies_what_vllms_function_applies(
    dtype: torch.dtype, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM pins its staging buffer where the platform allows it, which a CUDA
    # build of torch (vLLM 0.33's wheel) cannot do without a GPU.
    monkeypatch.setattr(vllm_utils, "PIN_MEMORY", False)
    vocab = 129280 if seed == 0 else 1000
    scheduler_output, grammar_output, input_batch, logits = hook_inputs(seed, 9, vocab, dtype)
    expected = logits.clone()
    vllm_utils.apply_grammar_bitmask(scheduler_output, grammar_output, input_batch, expected)
    apply_hook.RunnerApply(max_rows=4).apply(scheduler_output, grammar_output, input_batch, logits)
    assert_same(logits, expected)


@pytest.mark.seam
@pytest.mark.parametrize(
    ("layout", "num_mask_rows", "expected_mask_rows"),
    [(MaskLayout.PACKED, 6, [0, 1, 3, 4, 5]), (MaskLayout.BLOCKS, 9, [0, 1, 6, 7, 8])],
)
def test_mask_placement_follows_drafts_batch_order_and_layout(
    layout: MaskLayout, num_mask_rows: int, expected_mask_rows: list[int]
) -> None:
    logits_rows, mask_rows = apply_hook.mask_placement(
        ["a", "b", "c"],
        {"a": 0, "b": 1, "c": 2},
        {"a": [7, 7], "c": [7]},
        ["c", "gone", "a"],
        layout,
        num_mask_rows,
    )
    # a owns logits 0-2, b logit 3, c logits 4-5; the mask holds c (2 rows),
    # "gone" (1 row, not in the batch) and a (3 rows), packed or in blocks of 3.
    assert logits_rows == [4, 5, 0, 1, 2]
    assert mask_rows == expected_mask_rows


def fake_runner(backend: str) -> Any:
    config = SimpleNamespace(structured_outputs_config=SimpleNamespace(backend=backend))
    return SimpleNamespace(vllm_config=config, max_num_reqs=4, num_spec_tokens=0)


@pytest.fixture
def sampling_runner() -> Iterator[Callable[[Any], None]]:
    """Set the runner the hook thinks is sampling, as the sample_tokens wrapper does."""
    tokens = []

    def set_runner(runner: Any) -> None:
        tokens.append(apply_hook._sampling_runner.set(apply_hook._runner_apply(runner)))

    yield set_runner
    for token in reversed(tokens):
        apply_hook._sampling_runner.reset(token)


@pytest.mark.seam
@pytest.mark.parametrize(
    ("backend", "plugin_applies"), [(BACKEND_NAME, True), ("xgrammar", False), ("auto", False)]
)
def test_only_grammar_guard_runners_take_over(
    backend: str, plugin_applies: bool, sampling_runner: Callable[[Any], None]
) -> None:
    calls: list[str] = []
    dispatch = apply_hook.dispatch_apply(lambda *args: calls.append("vllm"))
    sampling_runner(fake_runner(backend))
    scheduler_output, grammar_output, input_batch, logits = hook_inputs(1, 3, 64, torch.float32)
    before = apply_hook.applied_steps()
    dispatch(scheduler_output, grammar_output, input_batch, logits)
    assert (apply_hook.applied_steps() == before + 1) is plugin_applies
    assert (calls == ["vllm"]) is not plugin_applies


@pytest.mark.seam
def test_outside_sample_tokens_vllms_function_runs() -> None:
    calls: list[str] = []
    dispatch = apply_hook.dispatch_apply(lambda *args: calls.append("vllm"))
    dispatch(None, None, None, torch.zeros(1, 32))
    assert calls == ["vllm"]


@pytest.mark.seam
def test_install_is_idempotent() -> None:
    from vllm.v1.worker import gpu_model_runner

    from grammar_guard.vllm_adapter.registration import install, installed_patches

    install()
    first = (gpu_model_runner.GPUModelRunner.sample_tokens, gpu_model_runner.apply_grammar_bitmask)
    install()
    second = (gpu_model_runner.GPUModelRunner.sample_tokens, gpu_model_runner.apply_grammar_bitmask)
    assert first == second
    assert installed_patches()["bitmask_apply"]
    wrapped = gpu_model_runner.apply_grammar_bitmask.__wrapped__  # type: ignore[attr-defined]
    assert wrapped is vllm_utils.apply_grammar_bitmask


def test_the_gpu_check_skips_cleanly_without_a_gpu() -> None:
    if torch.cuda.is_available():
        unavailable_here("a GPU is present: run python -m benchmarks.gpu_apply_check itself")
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_apply_check", "--part", "engines"],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("skipped: ")
