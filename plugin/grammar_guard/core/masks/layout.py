"""The token bitmask shared by every engine: int32 words, bit set = token allowed."""

from __future__ import annotations

import torch

BITS_PER_WORD = 32


def words_per_row(vocab_size: int) -> int:
    return (vocab_size + BITS_PER_WORD - 1) // BITS_PER_WORD


def allocate_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """A CPU bitmask with every token allowed (all bits set)."""
    return torch.full((num_rows, words_per_row(vocab_size)), -1, dtype=torch.int32)
