"""Apply the packed token bitmask to logits in place, from buffers owned across steps.

Bitmask row ``i`` masks logits row ``rows[i]``: every column ``t`` whose bit
(bit ``t % 32`` of word ``t // 32``) is clear becomes ``-inf``. Only the first
``min(logits width, 32 * words)`` columns are masked; wider logits keep their
trailing columns, which is what xgrammar does when no vocabulary size is given.

Two kernels share the bit convention:

* CPU: rows are processed in contiguous runs. A run of at most
  ``TABLE_KERNEL_ROWS`` rows goes through a per-byte lookup table in a few
  NumPy passes (:mod:`grammar_guard.core.masks.byte_table`): at small
  batches the number of operations, not the bytes, sets the cost. A longer
  run whose mask is almost all
  whole words (0 = 32 forbidden tokens, -1 = 32 allowed) is masked with one cap
  per word, and only the few mixed words are unpacked to bits; otherwise every
  bit is unpacked into an int32 lane whose sign says "forbidden". Both use
  vectorised arithmetic and bitwise ops: CPU ``masked_fill``/``where`` with a
  bool mask, and min/max on 16-bit floats, are several times slower here.
* Graph-safe (CUDA): a fixed-shape formulation with no host synchronisation, so
  it can run inside a CUDA graph; it also runs on CPU tensors, which is how it
  is tested without a GPU.

A forbidden logit becomes exactly ``-inf`` and an allowed one keeps its bits.
NaN logits are the exception: on the CPU kernel a forbidden NaN may stay NaN.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

import numpy as np
import torch

from grammar_guard.core.masks.byte_table import ByteTableKernel, table_operands
from grammar_guard.core.masks.layout import BITS_PER_WORD, words_per_row

if sys.byteorder != "little":  # the graph-safe kernel reads each word as four bytes
    raise ImportError("grammar_guard.core.masks.apply needs a little-endian machine")

# At or below this share of mixed words the word-by-word CPU kernel wins; above
# it, unpacking every bit is cheaper than gathering and scattering mixed words
# (the low end of where the two crossed in the retired bench_apply study,
# docs/benchmarks.md).
MIXED_WORD_LIMIT = 0.05

# Runs of at most this many rows use the byte-table kernel: it reads every
# token, but in two (float32) or four (16-bit) NumPy passes against some
# fifteen torch operations, and after other work, as between engine steps,
# dispatches cost more than bytes up to here (the strategy table of the retired
# bench_apply study, docs/benchmarks.md).
TABLE_KERNEL_ROWS = {torch.float32: 4, torch.bfloat16: 8, torch.float16: 8}

# Rows masked per pass of the dense CPU kernel: its int32 scratch (4 bytes a
# token) then stays in cache between passes instead of streaming through memory.
DENSE_CHUNK_ROWS = 8

# Logits row of each mask row, in mask order.
Rows = Sequence[int] | np.ndarray

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_SIGN_BIT = -(2**31)
# Left shift that moves bit j of a word into the sign bit of lane j.
_SHIFTS = (BITS_PER_WORD - 1 - torch.arange(BITS_PER_WORD)).to(torch.int32)


@functools.cache
def _float_bits(value: float, dtype: torch.dtype) -> int:
    """The bit pattern of ``value`` in ``dtype``, as a signed integer of the same width."""
    lane = torch.int32 if dtype == torch.float32 else torch.int16
    return int(torch.tensor(value, dtype=dtype).view(lane).item())


class _Arena:
    """Flat per-name storage handed out as views; grows only when asked for more."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._storage: dict[tuple[str, torch.dtype], torch.Tensor] = {}

    def reserve(self, name: str, dtype: torch.dtype, numel: int) -> None:
        key = (name, dtype)
        held = self._storage.get(key)
        if held is None or held.numel() < numel:
            self._storage[key] = torch.empty(numel, dtype=dtype, device=self._device)

    def view(self, name: str, dtype: torch.dtype, *shape: int) -> torch.Tensor:
        numel = int(np.prod(shape))
        self.reserve(name, dtype, numel)
        return self._storage[(name, dtype)][:numel].view(*shape)


def _forbidden_lanes(words: torch.Tensor, arena: _Arena, tag: str) -> torch.Tensor:
    """One int32 lane per token of ``words`` ([n, w]) whose sign bit says "forbidden".

    The other bits of a lane are leftovers of the word; callers only use the sign.
    """
    n, w = words.shape
    inverted = arena.view(tag + "inverted", torch.int32, n, w)
    torch.bitwise_not(words, out=inverted)
    lanes = arena.view(tag + "lanes", torch.int32, n, w, BITS_PER_WORD)
    torch.bitwise_left_shift(inverted.unsqueeze(-1), _SHIFTS, out=lanes)
    return lanes.view(n, w * BITS_PER_WORD)


def _mask_with_lanes(logits: torch.Tensor, lanes: torch.Tensor, arena: _Arena, tag: str) -> None:
    """Set ``logits`` to -inf where the lane's sign is set; overwrites ``lanes``."""
    lanes = lanes[:, : logits.shape[1]]
    if logits.dtype == torch.float32:
        _mask_float32(logits, lanes)
    else:
        _mask_16bit(logits, lanes, arena, tag)


def _mask_float32(logits: torch.Tensor, lanes: torch.Tensor) -> None:
    # Keeping only the sign and adding +inf's bits gives -inf for a forbidden
    # token and +inf for an allowed one; min(x, +inf) is x, bit for bit.
    lanes.bitwise_and_(_SIGN_BIT)
    lanes.bitwise_or_(_float_bits(float("inf"), torch.float32))
    torch.minimum(logits, lanes.view(torch.float32), out=logits)


def _mask_16bit(logits: torch.Tensor, lanes: torch.Tensor, arena: _Arena, tag: str) -> None:
    """Work on the 16-bit patterns as integers: half-float min/max round-trip through float32.

    With ``m`` all ones for a forbidden token and zero otherwise,
    ``(x | m) & ~(m & ~NEG_INF)`` is ``x`` when allowed and exactly ``-inf`` when not.
    """
    lanes.bitwise_right_shift_(BITS_PER_WORD - 1)  # arithmetic shift: 0 or -1
    m = arena.view(tag + "m16", torch.int16, *lanes.shape)
    m.copy_(lanes)
    patterns = logits.view(torch.int16)
    patterns.bitwise_or_(m)
    m.bitwise_and_(~_float_bits(float("-inf"), logits.dtype))
    m.bitwise_not_()
    patterns.bitwise_and_(m)


@functools.cache
def _infinities(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU (+inf, -inf) of ``dtype``, made once so steps do not build scalars."""
    values = torch.tensor([float("inf"), float("-inf")], dtype=dtype)
    return values[0], values[1]


def _runs(rows: Rows) -> list[tuple[int, int, int]]:
    """Split ``rows`` into (first mask row, first logits row, length) of consecutive rows.

    Plain Python: a few rows per step, where NumPy's per-call cost would dominate.
    """
    runs = []
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or rows[end] != rows[end - 1] + 1:
            runs.append((start, int(rows[start]), end - start))
            start = end
    return runs


def _is_word_table(logits: torch.Tensor) -> bool:
    """Whether the rows can be viewed as whole 32-column words without a copy."""
    return logits.is_contiguous() and logits.shape[1] % BITS_PER_WORD == 0


def _flat_words(words: torch.Tensor) -> torch.Tensor:
    """The storage behind a [n, w] slice of a contiguous mask, as one flat vector."""
    n, w = words.shape
    return words.as_strided(((n - 1) * words.stride(0) + w,), (1,))


class CpuBitmaskApplier:
    """The CPU kernel; see the module docstring for its strategies."""

    def __init__(self, max_rows: int, vocab_size: int) -> None:
        self._arena = _Arena(torch.device("cpu"))
        # nonzero() sizes its output by the data; torch grows this one tensor
        # in place, so it stops allocating once it has seen the largest step.
        self._mixed_index = torch.empty((0, 1), dtype=torch.int64)
        self._table_rows = dict(TABLE_KERNEL_ROWS)
        self._table = ByteTableKernel(max(self._table_rows.values()), vocab_size)
        words = words_per_row(vocab_size)
        chunk = min(max_rows, DENSE_CHUNK_ROWS)
        self._arena.reserve("dense.inverted", torch.int32, chunk * words)
        self._arena.reserve("dense.lanes", torch.int32, chunk * words * BITS_PER_WORD)
        self._arena.reserve("dense.m16", torch.int16, chunk * words * BITS_PER_WORD)
        for name in ("words.zero", "words.mixed"):
            self._arena.reserve(name, torch.bool, max_rows * words)

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: Rows | None) -> None:
        _check(logits, bitmask)
        if rows is None:
            rows = range(bitmask.shape[0])
        table_rows = self._table_rows[logits.dtype]
        table = table_operands(logits, bitmask) if table_rows else None
        for mask_start, logits_start, length in _runs(rows):
            if table is not None and length <= table_rows:
                self._table.apply(table, logits_start, mask_start, length)
                continue
            self._apply_run(
                logits[logits_start : logits_start + length],
                bitmask[mask_start : mask_start + length],
            )

    def _apply_run(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        columns = min(logits.shape[1], bitmask.shape[1] * BITS_PER_WORD)
        if columns % BITS_PER_WORD == 0 and _is_word_table(logits):
            words = bitmask[:, : columns // BITS_PER_WORD]
            zero, mixed = self._classify(words)
            if int(mixed.sum()) <= MIXED_WORD_LIMIT * mixed.numel():
                self._apply_by_words(logits, words, zero, mixed)
                return
        self._apply_dense(logits[:, :columns], bitmask)

    def _classify(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(word == 0, word neither 0 nor -1) for every word of the run."""
        zero = self._arena.view("words.zero", torch.bool, *words.shape)
        mixed = self._arena.view("words.mixed", torch.bool, *words.shape)
        torch.eq(words, 0, out=zero)
        torch.eq(words, -1, out=mixed)
        mixed.logical_or_(zero)
        return zero, mixed.logical_not_()

    def _apply_dense(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        for start in range(0, logits.shape[0], DENSE_CHUNK_ROWS):
            stop = start + DENSE_CHUNK_ROWS
            lanes = _forbidden_lanes(bitmask[start:stop], self._arena, "dense.")
            _mask_with_lanes(logits[start:stop], lanes, self._arena, "dense.")

    def _apply_by_words(
        self, logits: torch.Tensor, words: torch.Tensor, zero: torch.Tensor, mixed: torch.Tensor
    ) -> None:
        """Whole words through one broadcast cap per word, then the mixed words bit by bit."""
        n, w = words.shape
        row_words = logits.shape[1] // BITS_PER_WORD
        word_caps = self._arena.view("words.caps", logits.dtype, n, w)
        infinity, negative_infinity = _infinities(logits.dtype)
        torch.where(zero, negative_infinity, infinity, out=word_caps)
        grid = logits.view(n, row_words, BITS_PER_WORD)[:, :w]
        torch.minimum(grid, word_caps.unsqueeze(-1), out=grid)
        self._apply_mixed(logits.view(-1, BITS_PER_WORD), words, mixed, row_words)

    def _apply_mixed(
        self, table: torch.Tensor, words: torch.Tensor, mixed: torch.Tensor, row_words: int
    ) -> None:
        """Gather the mixed words' logits, mask them bit by bit, scatter them back.

        ``table`` is the run's logits as [rows * row_words, 32]: one word per row.
        """
        w = words.shape[1]
        torch.nonzero(mixed.view(-1), out=self._mixed_index.resize_(0, 1))
        count = self._mixed_index.shape[0]
        if count == 0:
            return
        flat_index = self._mixed_index.view(-1)
        # Mixed word k of the [n, w] selection is in row k // w; rows are
        # row_words long in the logits table and stride(0) long in the mask.
        row = self._arena.view("mixed.row", torch.int64, count)
        torch.div(flat_index, w, rounding_mode="floor", out=row)
        table_index = self._arena.view("mixed.table", torch.int64, count)
        torch.add(flat_index, row, alpha=row_words - w, out=table_index)
        mask_index = self._arena.view("mixed.mask", torch.int64, count)
        torch.add(flat_index, row, alpha=words.stride(0) - w, out=mask_index)

        picked_words = self._arena.view("mixed.words", torch.int32, count, 1)
        torch.index_select(_flat_words(words), 0, mask_index, out=picked_words.view(-1))
        picked = self._arena.view("mixed.logits", table.dtype, count, BITS_PER_WORD)
        torch.index_select(table, 0, table_index, out=picked)
        lanes = _forbidden_lanes(picked_words, self._arena, "mixed.")
        _mask_with_lanes(picked, lanes, self._arena, "mixed.")
        table.index_copy_(0, table_index, picked)


class GraphSafeBitmaskApplier:
    """Fixed-shape masking from static buffers with no host synchronisation.

    ``stage`` (host side, outside any graph) copies the mask into a static
    device buffer and writes, for every logits row, which mask row applies;
    rows without a grammar point at a last, all-allowed row. ``apply_staged``
    only reads those buffers, so it can be captured in a CUDA graph once per
    batch size and replayed after each ``stage``. Every logits row is
    rewritten (unconstrained ones with their own values), which keeps the
    shapes fixed.
    """

    def __init__(self, max_rows: int, vocab_size: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.max_rows = max_rows
        self.words = words_per_row(vocab_size)
        pinned = self.device.type == "cuda"
        self.bitmask = torch.full((max_rows + 1, self.words), -1, dtype=torch.int32, device=device)
        self.row_map = torch.full((max_rows,), max_rows, dtype=torch.int64, device=device)
        self._host_map = torch.full((max_rows,), max_rows, dtype=torch.int64, pin_memory=pinned)
        self._gathered = torch.empty((max_rows, self.words), dtype=torch.int32, device=device)
        self._bits = torch.empty((max_rows, self.words * 4, 8), dtype=torch.uint8, device=device)
        self._forbidden = torch.empty_like(self._bits, dtype=torch.bool)
        self._bit_values = (1 << torch.arange(8, device=device)).to(torch.uint8)
        self._map_copied = torch.cuda.Event() if pinned else None

    def stage(self, bitmask: torch.Tensor, rows: Rows | None, num_logits_rows: int) -> None:
        """Host part: copy ``bitmask`` and the logits-row -> mask-row map to the device."""
        count = bitmask.shape[0]
        if max(num_logits_rows, count) > self.max_rows:
            raise ValueError(f"more than {self.max_rows} rows")
        if bitmask.shape[1] != self.words:
            raise ValueError(f"bitmask rows must be {self.words} words")
        if self._map_copied is not None:
            # The pinned map is reused: the previous step's copy must have read it.
            self._map_copied.synchronize()
        host = self._host_map.numpy()
        host[:num_logits_rows] = self.max_rows
        host[np.arange(count) if rows is None else np.asarray(rows)] = np.arange(count)
        self.bitmask[:count].copy_(bitmask, non_blocking=True)
        self.row_map.copy_(self._host_map, non_blocking=True)
        if self._map_copied is not None:
            self._map_copied.record()

    def apply_staged(self, logits: torch.Tensor) -> None:
        """Device part: mask ``logits`` from the staged buffers; capture-safe."""
        n = logits.shape[0]
        columns = min(logits.shape[1], self.words * BITS_PER_WORD)
        gathered = self._gathered[:n]
        torch.index_select(self.bitmask, 0, self.row_map[:n], out=gathered)
        # Little-endian: byte b of word w holds tokens 32w + 8b ... 32w + 8b + 7.
        bits = self._bits[:n]
        torch.bitwise_and(gathered.view(torch.uint8).unsqueeze(-1), self._bit_values, out=bits)
        forbidden = self._forbidden[:n]
        torch.eq(bits, 0, out=forbidden)
        flat = forbidden.view(n, self.words * BITS_PER_WORD)[:, :columns]
        logits[:, :columns].masked_fill_(flat, float("-inf"))

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: Rows | None) -> None:
        _check(logits, bitmask)
        self.stage(bitmask, rows, logits.shape[0])
        self.apply_staged(logits)


def _check(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    if logits.dim() != 2 or bitmask.dim() != 2:
        raise ValueError("logits and bitmask must be 2-D")
    if bitmask.dtype != torch.int32 or not bitmask.is_contiguous():
        raise TypeError("bitmask must be a contiguous int32 tensor")
    if logits.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"logits must be float32, float16 or bfloat16, not {logits.dtype}")


class BitmaskApplier:
    """Applies bitmask rows to chosen logits rows with the kernel for the logits' device.

    Buffers are sized for ``max_rows`` rows of ``vocab_size`` tokens up front,
    reused every step, and regrown (outside any graph) only if a step needs more.
    """

    def __init__(self, max_rows: int, vocab_size: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.vocab_size = vocab_size
        self._cpu: CpuBitmaskApplier | None = None
        self._graph_safe: GraphSafeBitmaskApplier | None = None
        if self.device.type == "cpu":
            self._cpu = CpuBitmaskApplier(max_rows, vocab_size)
        else:
            self._graph_safe = GraphSafeBitmaskApplier(max_rows, vocab_size, self.device)

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor, rows: Rows | None = None) -> None:
        """Mask ``logits[rows[i]]`` with ``bitmask[i]`` in place; ``rows=None`` means row ``i``.

        ``bitmask`` is a contiguous CPU int32 tensor; ``rows`` holds distinct rows.
        """
        if logits.device != self.device:
            raise ValueError(f"applier is for {self.device}, logits are on {logits.device}")
        if self._cpu is not None:
            self._cpu.apply(logits, bitmask, rows)
            return
        assert self._graph_safe is not None
        needed = max(logits.shape[0], bitmask.shape[0])
        if needed > self._graph_safe.max_rows:
            self._graph_safe = GraphSafeBitmaskApplier(needed, self.vocab_size, self.device)
        self._graph_safe.apply(logits, bitmask, rows)
