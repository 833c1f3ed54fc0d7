"""Compile-cache metrics: counters, two gauges and a compile-time histogram.

Host-agnostic: a host exports :meth:`CacheMetrics.snapshot` however it likes
(the vLLM adapter serves it on ``/metrics``). Snapshots are plain data so
they can cross process boundaries as JSON and be summed.
"""

from __future__ import annotations

import bisect
import copy
import enum
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


class Counter(enum.Enum):
    """Monotonic counts; the exported name is ``grammar_guard_<value>_total``."""

    HITS = "cache_hits"
    MISSES = "cache_misses"
    COMPILES = "compiles"
    COMPILE_ERRORS = "compile_errors"
    COMPILE_TIMEOUTS = "compile_timeouts"
    # Compiles whose worker process died under them (not the hard-limit kill).
    COMPILE_CRASHES = "compile_crashes"
    # Quick-lane compiles demoted for overrunning their CPU budget (quick_budget.py).
    QUICK_COMPILE_OVERRUNS = "quick_compile_overruns"
    ESCALATIONS = "escalations"
    EVICTIONS = "evictions"
    # The persistent cache (GRAMMAR_GUARD_CACHE_DIR); zero while it is off.
    DISK_HITS = "disk_hits"
    DISK_MISSES = "disk_misses"
    DISK_WRITES = "disk_writes"
    DISK_ERRORS = "disk_errors"
    # Loads that cost more than disk_store.LOAD_SHARE of the compile they saved: file removed.
    DISK_UNPAID_LOADS = "disk_unpaid_loads"


class Gauge(enum.Enum):
    CACHE_BYTES = "cache_bytes"
    CACHE_ENTRIES = "cache_entries"


class LabelledCounter(enum.Enum):
    """Counts split by one label: ``grammar_guard_<value>_total{<label_name>="..."}``.

    Label values must come from a bounded set (keyword names, not client text).
    """

    # Requests accepted in GRAMMAR_GUARD_UNENFORCED=warn mode, once per
    # request for each JSON-Schema keyword xgrammar did not enforce.
    UNENFORCED = "unenforced"
    # Compiles by the engine that ran them (CompiledGrammar.engine_name). The
    # exporter folds them into grammar_guard_compiles_total{engine}, whose
    # engine="none" is the rest of Counter.COMPILES: compiles refused before
    # any engine ran, and grammars loaded from the persistent cache.
    COMPILES_BY_ENGINE = "compiles"
    # Background compiles of reused keys onto the faster-masking engine, by
    # outcome (see UpgradeOutcome).
    UPGRADES = "upgrades"

    @property
    def label_name(self) -> str:
        return _LABEL_NAMES[self]


_LABEL_NAMES = {
    LabelledCounter.UNENFORCED: "keyword",
    LabelledCounter.COMPILES_BY_ENGINE: "engine",
    LabelledCounter.UPGRADES: "outcome",
}


class UpgradeOutcome(enum.Enum):
    DONE = "done"  # later requests of the key get the upgraded grammar
    FAILED = "failed"  # the second engine refused it, in its compile or on a request's path
    SLOWER = "slower"  # its masks were not cheaper on the path a request took: dropped
    DROPPED = "dropped"  # compiled, but the key had left the cache (evicted, reset)


# Compiles range from microseconds (small schemas) to tens of seconds (long
# bounded strings on a large vocabulary); the buckets span both ends.
COMPILE_SECONDS_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)


@dataclass
class HistogramSnapshot:
    """Per-bucket (not cumulative) counts; the last bucket is ``+Inf``."""

    bounds: tuple[float, ...] = COMPILE_SECONDS_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(COMPILE_SECONDS_BUCKETS) + 1))
    total: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs the way Prometheus exposes a histogram."""
        labels = [repr(bound) for bound in self.bounds] + ["+Inf"]
        running, pairs = 0, []
        for label, count in zip(labels, self.counts, strict=True):
            running += count
            pairs.append((label, running))
        return pairs


@dataclass
class MetricsSnapshot:
    counters: dict[Counter, int] = field(default_factory=lambda: dict.fromkeys(Counter, 0))
    gauges: dict[Gauge, int] = field(default_factory=lambda: dict.fromkeys(Gauge, 0))
    compile_seconds: HistogramSnapshot = field(default_factory=HistogramSnapshot)
    labelled: dict[LabelledCounter, dict[str, int]] = field(
        default_factory=lambda: {counter: {} for counter in LabelledCounter}
    )

    def __getitem__(self, name: str) -> float:
        """Look a number up by its exported name, e.g. ``"grammar_guard_compiles_total"``."""
        return self.as_dict()[name]

    def as_dict(self) -> dict[str, float]:
        numbers: dict[str, float] = {
            f"grammar_guard_{counter.value}_total": value
            for counter, value in self.counters.items()
        }
        numbers.update({f"grammar_guard_{gauge.value}": v for gauge, v in self.gauges.items()})
        numbers["grammar_guard_compile_seconds_count"] = self.compile_seconds.count
        numbers["grammar_guard_compile_seconds_sum"] = self.compile_seconds.total
        for labelled in LabelledCounter:
            for label, value in self.labelled_values(labelled).items():
                name = f'grammar_guard_{labelled.value}_total{{{labelled.label_name}="{label}"}}'
                numbers[name] = value
        return numbers

    def labelled_values(self, counter: LabelledCounter) -> dict[str, int]:
        """The counts of ``counter`` by label, as exported."""
        values = dict(self.labelled[counter])
        if counter is LabelledCounter.COMPILES_BY_ENGINE:
            values["none"] = self.counters[Counter.COMPILES] - sum(values.values())
        return values

    def to_json(self) -> dict[str, Any]:
        return {
            "counters": {counter.value: v for counter, v in self.counters.items()},
            "gauges": {gauge.value: v for gauge, v in self.gauges.items()},
            "compile_seconds": {
                "counts": self.compile_seconds.counts,
                "sum": self.compile_seconds.total,
            },
            "labelled": {counter.value: dict(v) for counter, v in self.labelled.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricsSnapshot:
        histogram = HistogramSnapshot(
            counts=[int(c) for c in data["compile_seconds"]["counts"]],
            total=float(data["compile_seconds"]["sum"]),
        )
        if len(histogram.counts) != len(histogram.bounds) + 1:
            raise ValueError("histogram buckets do not match this version's")
        return cls(
            counters={c: int(data["counters"].get(c.value, 0)) for c in Counter},
            gauges={g: int(data["gauges"].get(g.value, 0)) for g in Gauge},
            compile_seconds=histogram,
            # Absent in files written before labelled counters existed.
            labelled={
                c: {str(k): int(v) for k, v in data.get("labelled", {}).get(c.value, {}).items()}
                for c in LabelledCounter
            },
        )

    @classmethod
    def total(cls, snapshots: Iterable[MetricsSnapshot]) -> MetricsSnapshot:
        """The sum over several caches (one per engine process)."""
        result = cls()
        for snapshot in snapshots:
            for counter, value in snapshot.counters.items():
                result.counters[counter] += value
            for gauge, value in snapshot.gauges.items():
                result.gauges[gauge] += value
            for i, count in enumerate(snapshot.compile_seconds.counts):
                result.compile_seconds.counts[i] += count
            result.compile_seconds.total += snapshot.compile_seconds.total
            for labelled, values in snapshot.labelled.items():
                into = result.labelled[labelled]
                for label, value in values.items():
                    into[label] = into.get(label, 0) + value
        return result


class CacheMetrics:
    """Thread-safe live numbers of one cache.

    ``on_change`` (if given) is called after every update, outside the lock,
    so an exporter can publish without polling.
    """

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._current = MetricsSnapshot()
        self._on_change = on_change

    def count(self, counter: Counter, amount: int = 1) -> None:
        if amount:
            with self._lock:
                self._current.counters[counter] += amount
            self._changed()

    def count_labelled(self, counter: LabelledCounter, label: str, amount: int = 1) -> None:
        if amount:
            with self._lock:
                values = self._current.labelled[counter]
                values[label] = values.get(label, 0) + amount
            self._changed()

    def set_size(self, cache_bytes: int, cache_entries: int) -> None:
        with self._lock:
            self._current.gauges[Gauge.CACHE_BYTES] = cache_bytes
            self._current.gauges[Gauge.CACHE_ENTRIES] = cache_entries
        self._changed()

    def observe_compile(self, seconds: float) -> None:
        histogram = self._current.compile_seconds
        with self._lock:
            histogram.counts[bisect.bisect_left(histogram.bounds, seconds)] += 1
            histogram.total += seconds
        self._changed()

    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return copy.deepcopy(self._current)

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
