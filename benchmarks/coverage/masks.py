"""How long a path takes to fill a request's token bitmask: its cost on every decoding step.

The writer's tokens for a schema's first valid instance are replayed into a grammar of their
own, fill then accept, as vLLM's engine drives one; after the verdict, so no verdict changes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from benchmarks.coverage.histogram import LogHistogram
from benchmarks.coverage.writer import Grammar

if TYPE_CHECKING:
    import torch

# Fills timed per schema and path: a long instance costs no more than a few
# hundred steps of decoding.
MAX_FILLS = 512
# The mask percentiles the report gives: a decode step waits for the slowest
# row of its batch, so the tail matters more than the median.
MASK_PERCENTILES = (50, 99, 99.9)
_REQUEST_ID = "coverage-mask"


def time_fills(grammar: Grammar, bitmask: torch.Tensor, tokens: Sequence[int]) -> LogHistogram:
    """The duration of the fill before each of ``tokens`` (at most MAX_FILLS), in ns."""
    times = LogHistogram()
    for token in tokens[:MAX_FILLS]:
        started = time.perf_counter_ns()
        grammar.fill_bitmask(bitmask, 0)
        times.add(time.perf_counter_ns() - started)
        if not grammar.accept_tokens(_REQUEST_ID, [token]):
            break  # the writer's grammar took it, so this one should have: the log says why
    return times
