"""Property tests of the mask apply path against an obviously correct reference."""

from __future__ import annotations

import subprocess
import sys
import zlib
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

from grammar_guard import BACKEND_NAME
from grammar_guard.core.masks import apply as bitmask_apply
from grammar_guard.core.masks.apply import (
    BitmaskApplier,
    CpuBitmaskApplier,
    GraphSafeBitmaskApplier,
)
from grammar_guard.core.masks.layout import words_per_row
from grammar_guard.vllm_adapter import apply_hook
from grammar_guard.vllm_adapter.compat import MaskLayout, installed_release

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
VOCABS = (1, 31, 33, 1000, 129280)
Kernel = Callable[[torch.Tensor, torch.Tensor, "np.ndarray | None"], None]
KernelFactory = Callable[[int, int], Kernel]


def reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """Unpack every bit and set each forbidden logit to -inf, one row at a time."""
    out = logits.clone()
    columns = min(logits.shape[1], bitmask.shape[1] * 32)
    for mask_row, logits_row in enumerate(rows):
        for token in range(columns):
            word = int(bitmask[mask_row, token // 32])
            if not (word >> (token % 32)) & 1:
                out[logits_row, token] = float("-inf")
    return out


def fast_reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """The same rule vectorised, for the 129k vocabulary; checked against ``reference``."""
    out = logits.clone()
    columns = min(logits.shape[1], bitmask.shape[1] * 32)
    bits = (bitmask.long().unsqueeze(-1) >> torch.arange(32)) & 1
    allowed = bits.view(bitmask.shape[0], -1)[:, :columns].bool()
    for mask_row, logits_row in enumerate(rows):
        out[logits_row, :columns][~allowed[mask_row]] = float("-inf")
    return out


def random_bitmask(
    generator: torch.Generator, rows: int, vocab: int, kind: str = "random"
) -> torch.Tensor:
    """A mask of ``kind``: random bits, or whole words with a given share of mixed ones."""
    shape = (rows, words_per_row(vocab))
    noise = torch.randint(-(2**31), 2**31 - 1, shape, generator=generator, dtype=torch.int32)
    if kind == "random":
        return noise
    share_mixed = {"structure": 0.01, "words": 0.3}[kind]
    draw = torch.rand(shape, generator=generator)
    uniform = torch.where(draw < (1 - share_mixed) / 2, 0, -1).to(torch.int32)
    return torch.where(draw < 1 - share_mixed, uniform, noise)


def random_logits(
    generator: torch.Generator, rows: int, width: int, dtype: torch.dtype
) -> torch.Tensor:
    return torch.randn((rows, width), generator=generator).to(dtype)


def assert_same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit-for-bit equality (so -0.0, infinities and NaN positions all count)."""
    lane = torch.int32 if got.dtype == torch.float32 else torch.int16
    assert torch.equal(got.view(lane), expected.view(lane))


def cpu_kernel(max_rows: int, vocab: int) -> Kernel:
    return CpuBitmaskApplier(max_rows, vocab).apply


def graph_safe_kernel(max_rows: int, vocab: int) -> Kernel:
    return GraphSafeBitmaskApplier(max_rows, vocab, "cpu").apply


KERNELS = {"cpu": cpu_kernel, "graph_safe": graph_safe_kernel}


@pytest.fixture(params=["cpu-table", "cpu-dense", "cpu-by_words", "cpu-auto", "graph_safe"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> KernelFactory:
    """A kernel factory; the CPU one with a forced strategy or left to choose by rows and words."""
    name, _, strategy = str(request.param).partition("-")
    limits = {"dense": -1.0, "by_words": 1.0}
    if strategy in limits:
        monkeypatch.setattr(bitmask_apply, "MIXED_WORD_LIMIT", limits[strategy])
        monkeypatch.setattr(bitmask_apply, "TABLE_KERNEL_ROWS", {d: 0 for d in DTYPES})
    if strategy == "table":
        monkeypatch.setattr(bitmask_apply, "TABLE_KERNEL_ROWS", {d: 64 for d in DTYPES})
    return KERNELS[name]


def test_fast_reference_matches_reference() -> None:
    generator = torch.Generator().manual_seed(1)
    for vocab, width in ((33, 33), (70, 80), (64, 40)):
        logits = random_logits(generator, 4, width, torch.float32)
        bitmask = random_bitmask(generator, 3, vocab)
        rows = np.array([3, 0, 2])
        assert_same(fast_reference(logits, bitmask, rows), reference(logits, bitmask, rows))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("extra_columns", [0, 7, 64])
@pytest.mark.parametrize("kind", ["random", "structure", "words"])
def test_matches_reference(
    kernel: KernelFactory,
    dtype: torch.dtype,
    vocab: int,
    extra_columns: int,
    kind: str,
    request: pytest.FixtureRequest,
) -> None:
    seed = zlib.crc32(request.node.name.encode())
    generator = torch.Generator().manual_seed(seed)
    num_logits = 6 if vocab > 10_000 else 9
    logits = random_logits(generator, num_logits, vocab + extra_columns, dtype)
    # Mixed constrained and unconstrained rows, not in batch order.
    rows = np.random.default_rng(seed).permutation(num_logits)[: num_logits - 2]
    bitmask = random_bitmask(generator, rows.size, vocab, kind)
    expected = fast_reference(logits, bitmask, rows)
    kernel(num_logits, vocab)(logits, bitmask, rows)
    assert_same(logits, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_vocabularies_against_the_bit_loop(kernel: KernelFactory, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(7)
    for vocab in (1, 31, 32, 33, 95):
        for width in (vocab, vocab + 1, vocab + 40):
            logits = random_logits(generator, 5, width, dtype)
            rows = np.array([4, 1, 2])
            bitmask = random_bitmask(generator, 3, vocab)
            expected = reference(logits, bitmask, rows)
            kernel(5, vocab)(logits, bitmask, rows)
            assert_same(logits, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values_of_allowed_tokens_are_kept_bit_for_bit(
    kernel: KernelFactory, dtype: torch.dtype
) -> None:
    specials = torch.tensor([float("inf"), float("-inf"), -0.0, 0.0, 1e-30, -3.5] * 16)
    logits = specials.to(dtype).repeat(2, 1)
    allowed = torch.full((2, 3), -1, dtype=torch.int32)
    forbidden = torch.zeros((2, 3), dtype=torch.int32)
    expected = torch.full_like(logits, float("-inf"))
    kept = logits.clone()
    kernel(2, 96)(kept, allowed, None)
    assert_same(kept, logits)
    kernel(2, 96)(logits, forbidden, None)
    assert_same(logits, expected)


@pytest.mark.parametrize("kernel_name", KERNELS)
def test_buffers_grow_when_a_step_has_more_rows(kernel_name: str) -> None:
    generator = torch.Generator().manual_seed(3)
    vocab = 1000
    apply: Kernel = (
        BitmaskApplier(1, vocab, "cpu").apply
        if kernel_name == "cpu"
        else GraphSafeBitmaskApplier(12, vocab, "cpu").apply
    )
    for rows in (1, 4, 12, 2):
        logits = random_logits(generator, rows, vocab, torch.float32)
        bitmask = random_bitmask(generator, rows, vocab)
        expected = fast_reference(logits, bitmask, np.arange(rows))
        apply(logits, bitmask, None)
        assert_same(logits, expected)


def test_graph_safe_replay_reads_newly_staged_masks() -> None:
    """The captured part only reads static buffers: restaging changes what it applies."""
    generator = torch.Generator().manual_seed(4)
    vocab, num_logits = 1000, 6
    applier = GraphSafeBitmaskApplier(8, vocab, "cpu")
    for rows in (np.array([5, 0, 3]), np.array([1]), np.array([2, 4, 0, 1])):
        logits = random_logits(generator, num_logits, vocab, torch.bfloat16)
        bitmask = random_bitmask(generator, rows.size, vocab)
        expected = fast_reference(logits, bitmask, rows)
        applier.stage(bitmask, rows, num_logits)
        applier.apply_staged(logits)
        assert_same(logits, expected)


def test_an_empty_mask_changes_nothing(kernel: KernelFactory) -> None:
    logits = torch.randn((3, 64))
    expected = logits.clone()
    kernel(3, 64)(logits, torch.zeros((0, 2), dtype=torch.int32), np.array([], dtype=np.int64))
    assert_same(logits, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_column_strided_and_inference_mode_logits(
    kernel: KernelFactory, dtype: torch.dtype
) -> None:
    """Logits NumPy cannot view row by row, and tensors made under inference mode, as vLLM's are."""
    generator = torch.Generator().manual_seed(11)
    vocab, rows = 1000, np.array([2, 0])
    with torch.inference_mode():
        strided = random_logits(generator, vocab, 3, dtype).t()
        plain = random_logits(generator, 3, vocab, dtype)
        for logits in (strided, plain):
            bitmask = random_bitmask(generator, rows.size, vocab)
            expected = fast_reference(logits, bitmask, rows)
            kernel(3, vocab)(logits, bitmask, rows)
            assert_same(logits, expected)


def test_rejects_inputs_it_cannot_mask() -> None:
    applier = BitmaskApplier(2, 64, "cpu")
    with pytest.raises(TypeError):
        applier.apply(torch.zeros((1, 64), dtype=torch.float64), torch.zeros((1, 2), torch.int32))
    with pytest.raises(TypeError):
        applier.apply(torch.zeros((1, 64)), torch.zeros((1, 2), dtype=torch.int64))
    with pytest.raises(ValueError):
        applier.apply(torch.zeros(64), torch.zeros((1, 2), dtype=torch.int32))


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
