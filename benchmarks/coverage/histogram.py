"""Durations on a logarithmic scale: a few hundred bytes for any number of samples.

64 buckets per doubling: a percentile is off by at most 0.55%; merging two is adding counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

_BUCKETS_PER_DOUBLING = 64


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

    def cumulative_us(self) -> list[tuple[float, float]]:
        """Each bucket's middle in microseconds and the share of samples up to it (0 to 1)."""
        total, seen, points = self.count, 0, []
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            points.append((_middle_ns(bucket) / 1000, seen / total))
        return points

    def _percentile_us(self, percentile: float) -> float | None:
        total = self.count
        if not total:
            return None
        rank = max(1, math.ceil(percentile / 100 * total))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return round(_middle_ns(bucket) / 1000, 3)
        raise AssertionError("the ranks add up to the total")


def _middle_ns(bucket: int) -> float:
    """The geometric middle of a bucket: no value in it is further than half a bucket."""
    return float(2 ** ((bucket + 0.5) / _BUCKETS_PER_DOUBLING))
