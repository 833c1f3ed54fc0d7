"""Fill one engine step's bitmask rows with the fastest strategy for the batch at hand.

A host collects, for one step, the rows its grammars must fill and the rows
that allow every token, and hands them to :meth:`BitmaskFiller.fill`. The
filler picks a strategy from the batch size and from what filling cost on the
previous step, so a step of simple grammars pays no thread overhead and a
step inside long bounded strings gets every core.

Why these strategies and thresholds ("easy" rows are a JSON enum/integer
object, "hard" rows sit inside a long bounded string; the figures are in
docs/benchmarks.md, "Bitmask fill"):

- One native batch call on one thread is faster than a per-row loop on
  cheap rows (no Python call per row) and within noise on costly ones, so
  it is the default from 2 rows on.
- xgrammar's fill releases the GIL, so a Python pool could run fills in
  parallel; it is no faster than the native batch on 2 threads and slower
  on small steps, so the parallel strategy is the native one.
- Two threads cost a fixed overhead per call (waking and joining threads,
  more when a core is busy) and pay off only when each thread gets
  milliseconds of work: see ``PARALLEL_MIN_WORK_S``.
- When a core is busy, two threads stop paying off even then, beside
  another process or inside the engine right after the model's forward
  (whose OpenMP threads share the cores). So above the threshold the filler
  keeps the last measured time per row of both batch strategies, uses the
  faster one, and re-measures the other every ``PROBE_INTERVAL_STEPS`` steps.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from grammar_guard.core.engines.base import MatcherWrapper

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import TokenMatcher

# Estimated sequential fill work of a step above which a multi-threaded batch
# fill wins despite its fixed cost (between where it was seen to lose and where
# it clearly won).
PARALLEL_MIN_WORK_S = 1.5e-3
# What a row is assumed to cost before any step was measured: a simple grammar.
INITIAL_ROW_COST_S = 3e-6
MAX_FILL_THREADS = 8
# How often, above the threshold, the slower batch strategy is measured again:
# rarely enough that probing costs a few percent, often enough to notice
# within a fraction of a second that a busy core was freed (or taken).
PROBE_INTERVAL_STEPS = 16


class FillStrategy(enum.Enum):
    LOOP = "loop"  # one fill call per row
    BATCH = "batch"  # one batch call on one thread
    PARALLEL = "parallel"  # one batch call on several threads


class FillTarget(Protocol):
    """One request's grammar as the filler sees it."""

    def fill_bitmask(self, bitmask: torch.Tensor, row: int, /) -> None:
        """Fill ``row``; must never raise (a faulty grammar allows every token)."""
        ...

    def batch_matcher(self) -> TokenMatcher | None:
        """The matcher a batch call may fill directly, or None to go through ``fill_bitmask``."""
        ...


class RowFill(NamedTuple):  # a tuple: built once per row and step, so it must be cheap
    target: FillTarget
    row: int


def choose_strategy(num_rows: int, row_cost_s: float, threads: int) -> FillStrategy:
    if num_rows <= 1:
        return FillStrategy.LOOP
    if threads > 1 and num_rows * row_cost_s >= PARALLEL_MIN_WORK_S:
        return FillStrategy.PARALLEL
    return FillStrategy.BATCH


def default_threads() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), MAX_FILL_THREADS))


class BitmaskFiller:
    """Fills the rows of successive steps; one per host bitmask, used from one thread.

    The cost signal is the previous step's measured fill time per row; above
    the threshold, the two batch strategies race (see the module docstring).
    """

    def __init__(
        self,
        *,
        threads: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._threads = default_threads() if threads is None else threads
        self._clock = clock
        self._row_cost_s = INITIAL_ROW_COST_S
        # Last measured wall seconds per row of each strategy.
        self._row_wall_s: dict[FillStrategy, float] = {}
        self._steps_since_probe = 0

    def fill(
        self, bitmask: torch.Tensor, fills: Sequence[RowFill], allow_all: Iterable[int] = ()
    ) -> FillStrategy:
        """Fill ``fills`` and set every ``allow_all`` row to allow all tokens; never raises."""
        if len(fills) == 1 and not allow_all:
            # A lone row has one strategy; timing it would cost as much as the
            # fill of a simple grammar.
            fills[0].target.fill_bitmask(bitmask, fills[0].row)
            return FillStrategy.LOOP
        for row in allow_all:
            bitmask[row].fill_(-1)
        batch: list[RowFill] = []
        matchers: list[TokenMatcher] = []
        for fill in fills:
            matcher = fill.target.batch_matcher()
            if matcher is None:
                fill.target.fill_bitmask(bitmask, fill.row)
            else:
                batch.append(fill)
                matchers.append(matcher)
        strategy = self._choose(len(batch))
        if not batch:
            return strategy
        threads = self._threads if strategy is FillStrategy.PARALLEL else 1
        started = self._clock()
        if strategy is FillStrategy.LOOP:
            _fill_each(bitmask, batch)
        else:
            _fill_batch(bitmask, batch, matchers, threads)
        row_wall_s = (self._clock() - started) / len(batch)
        self._row_wall_s[strategy] = row_wall_s
        # Counted as sequential work, so the signal does not drop just
        # because the work was spread over threads.
        self._row_cost_s = row_wall_s * threads
        return strategy

    def _choose(self, num_rows: int) -> FillStrategy:
        strategy = choose_strategy(num_rows, self._row_cost_s, self._threads)
        if strategy is not FillStrategy.PARALLEL:
            return strategy
        parallel = self._row_wall_s.get(FillStrategy.PARALLEL)
        batch = self._row_wall_s.get(FillStrategy.BATCH)
        if parallel is None or batch is None:
            return FillStrategy.PARALLEL
        faster, slower = (
            (FillStrategy.PARALLEL, FillStrategy.BATCH)
            if parallel < batch
            else (FillStrategy.BATCH, FillStrategy.PARALLEL)
        )
        self._steps_since_probe += 1
        if self._steps_since_probe < PROBE_INTERVAL_STEPS:
            return faster
        self._steps_since_probe = 0
        return slower


def _fill_batch(
    bitmask: torch.Tensor, batch: list[RowFill], matchers: list[TokenMatcher], threads: int
) -> None:
    try:
        fill_by_engine(matchers, bitmask, [fill.row for fill in batch], threads=threads)
    except Exception:
        # Some matcher failed and the batch call cannot say which: every row
        # is filled again on its own, so the faulty grammar alone is marked
        # and gets an all-allowed row.
        _fill_each(bitmask, batch)


def _fill_each(bitmask: torch.Tensor, fills: Sequence[RowFill]) -> None:
    for fill in fills:
        fill.target.fill_bitmask(bitmask, fill.row)


def fill_by_engine(
    matchers: Sequence[TokenMatcher],
    bitmask: torch.Tensor,
    rows: Sequence[int],
    *,
    threads: int,
) -> None:
    """Batch-fill rows whose matchers may come from several engines: one call per engine name.

    A :class:`MatcherWrapper` fills as the matcher inside it does, so that
    matcher joins its engine's call: each engine's batch fill then sees only
    its own matchers.
    """
    groups: dict[str, tuple[list[TokenMatcher], list[int]]] = {}
    for matcher, row in zip(matchers, rows, strict=True):
        while isinstance(matcher, MatcherWrapper):
            matcher = matcher.inner
        group_matchers, group_rows = groups.setdefault(matcher.engine_name, ([], []))
        group_matchers.append(matcher)
        group_rows.append(row)
    for group_matchers, group_rows in groups.values():
        group_matchers[0].fill_batch(group_matchers, bitmask, group_rows, threads=threads)
