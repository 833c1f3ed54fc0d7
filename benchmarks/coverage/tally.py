"""Counts per path over a set of schemas: what compiled, what was refused, what was judged right.

A refused schema (timeouts included) rejects all its instances: its invalid ones count as
rejected, its valid ones as lost to the refusal; so every invalid instance accepted is one
accepted by a compiled grammar.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.coverage.histogram import LogHistogram
from benchmarks.coverage.masks import MASK_PERCENTILES
from benchmarks.coverage.results import TIMEOUT, PathResult, SchemaResult

PERCENTILES = (50, 90, 99)


@dataclass
class Tally:
    schemas: int = 0
    compiled: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # by reason, timeouts excluded
    timeouts: int = 0
    valid_total: int = 0
    valid_accepted: int = 0
    valid_refused: int = 0  # valid instances of refused or timed-out schemas
    invalid_total: int = 0
    invalid_rejected: int = 0
    invalid_accepted: int = 0
    compile_s: list[float] = field(default_factory=list)
    compile_cpu_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0  # every path check's CPU time, refusals included
    engines: Counter[str] = field(default_factory=Counter)  # compiled schemas by engine
    mask_ns: LogHistogram = field(default_factory=LogHistogram)  # every timed fill

    @classmethod
    def of(cls, results: Iterable[SchemaResult], path: str) -> Tally:
        tally = cls()
        for result in results:
            if path in result.paths:
                tally.add(result.ref.valid_total, result.ref.invalid_total, result.paths[path])
        return tally

    def add(self, valid_total: int, invalid_total: int, result: PathResult) -> None:
        self.schemas += 1
        self.cpu_s += result.cpu_s or 0.0
        self.valid_total += valid_total
        self.invalid_total += invalid_total
        if result.compiled:
            self.compiled += 1
            self.valid_accepted += result.valid_accepted
            self.invalid_rejected += result.invalid_rejected
            self.invalid_accepted += sum(not wrong.valid for wrong in result.wrong)
            if result.compile_s is not None:
                self.compile_s.append(result.compile_s)
            if result.compile_cpu_s is not None:
                self.compile_cpu_s.append(result.compile_cpu_s)
            if result.engine is not None:
                self.engines[result.engine] += 1
            self.mask_ns.merge(result.mask_ns)
            return
        if result.outcome == TIMEOUT:
            self.timeouts += 1
        else:
            self.refused[result.outcome] += 1
        self.valid_refused += valid_total
        self.invalid_rejected += invalid_total

    @property
    def valid_rejected(self) -> int:
        """Valid instances a compiled grammar rejected (refusals not included)."""
        return self.valid_total - self.valid_accepted - self.valid_refused

    def as_dict(self) -> dict[str, Any]:
        return {
            "schemas": self.schemas,
            "compiled": self.compiled,
            "refused": dict(sorted(self.refused.items())),
            "timeouts": self.timeouts,
            "valid_total": self.valid_total,
            "valid_accepted": self.valid_accepted,
            "valid_rejected": self.valid_rejected,
            "valid_refused": self.valid_refused,
            "invalid_total": self.invalid_total,
            "invalid_rejected": self.invalid_rejected,
            "invalid_accepted_outside_refusals": self.invalid_accepted,
            "compile_s": _percentiles(self.compile_s),
            "compile_cpu_s": _percentiles(self.compile_cpu_s),
            "cpu_total_s": round(self.cpu_s, 3),
            "engines": dict(sorted(self.engines.items())),
            "mask_fills": self.mask_ns.count,
            "mask_us": self.mask_ns.percentiles_us(MASK_PERCENTILES),
        }


def _percentiles(values: list[float]) -> dict[str, float | None]:
    """Nearest-rank percentiles and the maximum; None for an empty list."""
    times = sorted(values)
    summary: dict[str, float | None] = {
        f"p{p}": times[max(0, math.ceil(p / 100 * len(times)) - 1)] if times else None
        for p in PERCENTILES
    }
    summary["max"] = times[-1] if times else None
    return summary
