"""How long a path takes to fill a request's token bitmask: its cost on every decoding step.

The writer's tokens for a schema's first valid instance are replayed into a grammar of their
own, fill then accept, as vLLM's engine drives one; after the verdict, so no verdict changes.
The durations go into log buckets: a few hundred bytes for any number of fills.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from harness.schema_data.writer import Grammar

# Fills timed per schema and path: a long instance costs no more than a few
# hundred steps of decoding.
MAX_FILLS = 512
# The mask percentiles the report gives: a decode step waits for the slowest
# row of its batch, so the tail matters more than the median.
MASK_PERCENTILES = (50, 99, 99.9)
# 64 buckets per doubling: a percentile is off by at most 0.55%.
_BUCKETS_PER_DOUBLING = 64
_REQUEST_ID = "coverage-mask"


@dataclass
class LogHistogram:
    counts: dict[int, int] = field(default_factory=dict)  # bucket -> samples

    def add(self, value_ns: int) -> None:
        bucket = math.floor(math.log2(max(value_ns, 1)) * _BUCKETS_PER_DOUBLING)
        self.counts[bucket] = self.counts.get(bucket, 0) + 1

    def merge(self, other: LogHistogram) -> None:
        for bucket, count in other.counts.items():
            self.counts[bucket] = self.counts.get(bucket, 0) + count

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def percentiles_us(self, percentiles: Iterable[float]) -> dict[str, float | None]:
        """Nearest-rank percentiles in microseconds, named ``p50``, ``p99.9``; None when empty."""
        return {f"p{p:g}": self._percentile_us(p) for p in percentiles}

    def _percentile_us(self, percentile: float) -> float | None:
        rank = max(1, math.ceil(percentile / 100 * self.count))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                # The bucket's geometric middle: no value in it is further than half a bucket.
                return round(2 ** ((bucket + 0.5) / _BUCKETS_PER_DOUBLING) / 1000, 3)
        return None  # no samples


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
