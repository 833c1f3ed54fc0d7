"""Mask a few rows of logits in two to four NumPy passes, through a per-byte lookup table.

Between two engine steps the forward pass and the scheduler push the mask
code and its buffers out of the caches, so at small batches a kernel's cost
is mostly how many operations it dispatches, not how many bytes it moves.
This kernel dispatches the fewest: each byte of the packed mask (tokens
``8k`` to ``8k + 7`` of its row, bit ``j`` for token ``8k + j`` on a
little-endian machine) indexes a 256-entry table holding those eight tokens'
masking values, so one ``np.take`` expands the whole mask, and one to three
elementwise passes apply it:

* float32: the table holds ``+inf`` (allowed) or ``-inf`` (forbidden), and
  ``minimum(logit, cap)`` keeps an allowed logit bit for bit;
* 16-bit floats (NumPy has no bfloat16): the logits are read as int16 and
  the table holds all ones for a forbidden token, so
  ``x ^ ((x ^ NEG_INF) & forbidden)`` is ``x`` or exactly ``-inf``.

It reads every token, whatever the mask, so larger batches are better served
by the word-skipping torch kernel of :mod:`grammar_guard.core.masks.apply`.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np
import torch

from grammar_guard.core.masks.layout import BITS_PER_WORD, words_per_row

if sys.byteorder != "little":  # a mask byte's tokens are read in little-endian order
    raise ImportError("grammar_guard.core.masks.byte_table needs a little-endian machine")

BITS_PER_BYTE = 8
_BYTE_VALUES = np.arange(256, dtype=np.uint8)[:, np.newaxis]
# Row b, column j: whether bit j of byte value b is clear (token j of that byte forbidden).
_FORBIDDEN_BITS = np.unpackbits(_BYTE_VALUES, axis=1, bitorder="little") == 0


def _as_table(lanes: np.ndarray) -> np.ndarray:
    """A (256, 8) lane table as 256 opaque items, so ``np.take`` copies a byte's 8 lanes at once."""
    item = np.dtype((np.void, BITS_PER_BYTE * lanes.dtype.itemsize))
    return np.ascontiguousarray(lanes).view(item).reshape(256)


@functools.cache
def _float32_caps() -> np.ndarray:
    caps = np.where(_FORBIDDEN_BITS, np.float32(-np.inf), np.float32(np.inf))
    return _as_table(caps.astype(np.float32))


@functools.cache
def _int16_forbidden() -> np.ndarray:
    return _as_table(np.where(_FORBIDDEN_BITS, np.int16(-1), np.int16(0)).astype(np.int16))


@functools.cache
def _negative_infinity_bits(dtype: torch.dtype) -> np.int16:
    return np.int16(torch.tensor(float("-inf"), dtype=dtype).view(torch.int16).item())


@dataclass(frozen=True)
class TableOperands:
    """NumPy views of one step's logits and mask, made once and sliced per run of rows."""

    logits: np.ndarray  # float32 values, or a 16-bit float's bit patterns as int16
    mask_bytes: np.ndarray  # [mask rows, 4 * words] uint8
    negative_infinity: np.int16 | None  # the 16-bit -inf pattern; None for float32


def table_operands(logits: torch.Tensor, bitmask: torch.Tensor) -> TableOperands | None:
    """Views of ``logits`` and the contiguous int32 ``bitmask``, or None where NumPy cannot
    write through to the logits (another device, strided columns, autograd)."""
    if logits.device.type != "cpu" or logits.stride(1) != 1 or logits.requires_grad:
        return None
    mask_bytes = bitmask.numpy().view(np.uint8)
    if logits.dtype == torch.float32:
        return TableOperands(logits.numpy(), mask_bytes, None)
    patterns = logits.view(torch.int16).numpy()
    return TableOperands(patterns, mask_bytes, _negative_infinity_bits(logits.dtype))


class ByteTableKernel:
    """Masks up to ``max_rows`` consecutive rows per call from one scratch buffer made once."""

    def __init__(self, max_rows: int, vocab_size: int) -> None:
        self.max_rows = max_rows
        self._tokens = max_rows * words_per_row(vocab_size) * BITS_PER_WORD
        # Four bytes a token: float32 caps, or 16-bit forbidden lanes and scratch.
        self._scratch = np.empty(4 * self._tokens, dtype=np.uint8)

    def apply(self, operands: TableOperands, logits_row: int, mask_row: int, rows: int) -> None:
        """Mask ``rows`` logits rows from ``logits_row`` with as many mask rows from ``mask_row``.

        Only the first ``min(width, 32 * words)`` columns are masked.
        """
        mask_bytes = operands.mask_bytes[mask_row : mask_row + rows]
        tokens = mask_bytes.size * BITS_PER_BYTE
        if tokens > self._tokens:
            raise ValueError(f"more than {self.max_rows} rows of {self._tokens // self.max_rows}")
        logits = operands.logits[logits_row : logits_row + rows]
        columns = min(logits.shape[1], mask_bytes.shape[1] * BITS_PER_BYTE)
        logits = logits[:, :columns]
        if operands.negative_infinity is None:
            caps = self._scratch[: 4 * tokens].view(_float32_caps().dtype)
            caps = caps.reshape(mask_bytes.shape)
            np.take(_float32_caps(), mask_bytes, out=caps)
            np.minimum(logits, caps.view(np.float32)[:, :columns], out=logits)
            return
        forbidden = self._scratch[: 2 * tokens].view(_int16_forbidden().dtype)
        forbidden = forbidden.reshape(mask_bytes.shape)
        np.take(_int16_forbidden(), mask_bytes, out=forbidden)
        flips = self._scratch[2 * tokens : 2 * tokens + 2 * rows * columns].view(np.int16)
        flips = flips.reshape(rows, columns)
        np.bitwise_xor(logits, operands.negative_infinity, out=flips)
        np.bitwise_and(flips, forbidden.view(np.int16)[:, :columns], out=flips)
        np.bitwise_xor(logits, flips, out=logits)
