"""Property tests of the core mask apply kernels against an obviously correct reference.

The kernels are the host-agnostic core, so these run on every vLLM release;
the vLLM apply hook's tests (unit_tests/vllm_adapter/test_bitmask_apply.py)
import this module's reference and helpers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from grammar_guard.core.masks import apply as bitmask_apply
from grammar_guard.core.masks.apply import (
    BitmaskApplier,
    CpuBitmaskApplier,
    GraphSafeBitmaskApplier,
)
from grammar_guard.core.masks.layout import words_per_row

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
