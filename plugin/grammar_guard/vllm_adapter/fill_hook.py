"""Fill grammar-guard's per-step bitmask with core's batch strategies.

vLLM's ``StructuredOutputManager.grammar_bitmask`` fills one row at a time
(a thread pool only beyond 128 requests and never with speculative decoding).
This hook replaces it for the grammar-guard backend alone; every other
backend runs vLLM's original.

Each request gets the rows vLLM gives it: one per scheduled draft token, then
one for the bonus token (none after drafts for diffusion models), placed
where the installed release's model runners read them
(:class:`~grammar_guard.vllm_adapter.compat.MaskLayout`). Draft rows depend on
the grammar state after the previous draft, so the step runs in levels: level
``k`` fills row ``k`` of every request in one batch, then advances each
grammar by its ``k``-th draft. vLLM's own ``_get_constraint_bounds`` decides
which rows are constrained (reasoning), and its rules for padding (-1
drafts), terminated grammars, rejected drafts (later rows repeat the last
valid row) and, where the release has them, the reasoning-end tokens a
reasoning row forbids are kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from vllm.logger import init_logger
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.utils import strip_speculative_padding

from grammar_guard.core.bitmask import BITS_PER_WORD
from grammar_guard.core.bitmask_fill import BitmaskFiller, FillStrategy, RowFill
from grammar_guard.vllm_adapter.compat import installed_release
from grammar_guard.vllm_adapter.patching import cached_state

if TYPE_CHECKING:
    import numpy.typing as npt
    import torch
    from vllm.v1.request import Request

    from grammar_guard.vllm_adapter.backend import GuardedGrammar

logger = init_logger(__name__)

# The manager's filler, in its plugin state: it keeps the cost of the previous step.
FILLER_STATE = "bitmask_filler"


@dataclass
class FillCounters:
    """What the hook did in this process: for tests and diagnostics."""

    steps: int = 0
    rows: int = 0
    strategies: dict[FillStrategy, int] = field(default_factory=dict)


counters = FillCounters()


def bitmask_fill(original: Callable[..., Any]) -> Callable[..., Any]:
    def grammar_bitmask(
        self: StructuredOutputManager,
        requests: dict[str, Request],
        structured_output_request_ids: list[str],
        scheduled_spec_decode_tokens: dict[str, list[int]],
    ) -> npt.NDArray[np.int32] | None:
        if not structured_output_request_ids or not _is_grammar_guard(self.backend):
            return original(
                self, requests, structured_output_request_ids, scheduled_spec_decode_tokens
            )
        if len(structured_output_request_ids) == 1 and not scheduled_spec_decode_tokens:
            # One row and no drafts: vLLM's own loop is the cheapest way to fill it.
            bitmask = original(
                self, requests, structured_output_request_ids, scheduled_spec_decode_tokens
            )
            _record_step(1, FillStrategy.LOOP)
            return bitmask
        return _fill_step(
            self,
            [requests[request_id] for request_id in structured_output_request_ids],
            scheduled_spec_decode_tokens,
        )

    return grammar_bitmask


def _is_grammar_guard(backend: object) -> bool:
    return isinstance(backend, _backend_type())


@functools.cache
def _backend_type() -> type:
    # Imported on first use, not with this module: registration imports this
    # module in every vLLM process, and the backend pulls in xgrammar.
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    return GrammarGuardBackend


@dataclass
class _LevelRows:
    """The rows of one batch: those a grammar fills and those that allow every token but some."""

    fills: list[RowFill] = field(default_factory=list)
    allow_all: list[int] = field(default_factory=list)
    forbidden: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)

    def allow(self, row: int, except_tokens: tuple[int, ...] = ()) -> None:
        self.allow_all.append(row)
        if except_tokens:
            self.forbidden.append((row, except_tokens))

    def fill(self, filler: BitmaskFiller, bitmask: torch.Tensor) -> None:
        _count(filler.fill(bitmask, self.fills, self.allow_all))
        for row, tokens in self.forbidden:
            _forbid(bitmask, row, tokens)


def _forbid(bitmask: torch.Tensor, row: int, token_ids: tuple[int, ...]) -> None:
    words = bitmask[row].numpy().view(np.uint32)
    ids = np.asarray(token_ids, dtype=np.uint32)
    # ``at``: several tokens may share a word.
    np.bitwise_and.at(words, ids // BITS_PER_WORD, ~(np.uint32(1) << (ids % BITS_PER_WORD)))


@dataclass
class _RequestRows:
    """One request's rows in this step and its grammar's progress through its drafts."""

    request_id: str
    grammar: GuardedGrammar
    drafts: list[int]
    first_row: int
    num_rows: int
    grammar_start: int
    constraint_start: int
    reasoning_ends: tuple[int, ...]
    advanced: int = 0
    padded: bool = False
    failed_row: int | None = None

    def stage(self, level: int, bitmask: torch.Tensor, rows: _LevelRows) -> None:
        """Queue this request's row of ``level`` for filling, or settle it here."""
        row = self.first_row + level
        if self.failed_row is not None:
            bitmask[row].copy_(bitmask[self.failed_row])
        elif self.padded:
            rows.allow(row)
        elif level < self.constraint_start:
            rows.allow(row, self.reasoning_ends)
        elif self.grammar.is_terminated():
            rows.allow(row)
        else:
            rows.fills.append(RowFill(self.grammar, row))

    def advance(self, level: int) -> None:
        """Feed draft ``level`` to the grammar once that level's rows are filled."""
        if level >= len(self.drafts) or self.failed_row is not None:
            return
        token = self.drafts[level]
        if token < 0:
            self.padded = True
        elif not self.padded and level >= self.grammar_start:
            if not self.grammar.is_terminated() and self.grammar.accept_tokens(
                self.request_id, [token]
            ):
                self.advanced += 1
            else:
                self.failed_row = self.first_row + level
                logger.error(
                    "Grammar terminated or rejected draft token %d of request %s while "
                    "filling its bitmask; its later rows repeat the last valid one",
                    token,
                    self.request_id,
                )

    def restore(self) -> None:
        if self.advanced:
            self.grammar.rollback(self.advanced)


def _fill_step(
    manager: StructuredOutputManager,
    requests: list[Request],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> npt.NDArray[np.int32]:
    bitmask = _step_bitmask(manager)
    filler = _filler(manager)
    drafts = scheduled_spec_decode_tokens
    if drafts and any(drafts.get(request.request_id) for request in requests):
        rows, num_rows = _fill_with_drafts(manager, filler, bitmask, requests, drafts)
    else:
        rows, num_rows = _fill_one_row_each(manager, filler, bitmask, requests)
    counters.steps += 1
    counters.rows += rows
    # A numpy view, as vLLM returns it: cheaper to send to the workers than a tensor.
    return bitmask[:num_rows].numpy()


def _fill_one_row_each(
    manager: StructuredOutputManager,
    filler: BitmaskFiller,
    bitmask: torch.Tensor,
    requests: list[Request],
) -> tuple[int, int]:
    """The common step, without drafts: the level machinery would only cost time here.

    Returns the rows filled and the rows the step's bitmask spans.
    """
    first_rows, num_rows = _layout(manager, [1] * len(requests))
    rows = _LevelRows()
    for row, request in zip(first_rows, requests, strict=True):
        grammar = request.structured_output_request.grammar  # type: ignore[union-attr]
        constrained = manager._get_constraint_bounds(request, ()).constraint_start == 0
        if not constrained:
            rows.allow(row, _reasoning_ends(manager, request))
        elif grammar.is_terminated():  # type: ignore[union-attr]
            rows.allow(row)
        else:
            rows.fills.append(RowFill(grammar, row))  # type: ignore[arg-type]
    rows.fill(filler, bitmask)
    return len(requests), num_rows


def _fill_with_drafts(
    manager: StructuredOutputManager,
    filler: BitmaskFiller,
    bitmask: torch.Tensor,
    requests: list[Request],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> tuple[int, int]:
    runs, num_rows = _plan_rows(manager, requests, scheduled_spec_decode_tokens)
    try:
        for level in range(max(run.num_rows for run in runs)):
            _fill_level(filler, bitmask, runs, level)
    finally:
        for run in runs:
            run.restore()
    return sum(run.num_rows for run in runs), num_rows


def _fill_level(
    filler: BitmaskFiller, bitmask: torch.Tensor, runs: list[_RequestRows], level: int
) -> None:
    rows = _LevelRows()
    active = [run for run in runs if level < run.num_rows]
    for run in active:
        run.stage(level, bitmask, rows)
    rows.fill(filler, bitmask)
    for run in active:
        run.advance(level)


def _count(strategy: FillStrategy) -> None:
    counters.strategies[strategy] = counters.strategies.get(strategy, 0) + 1


def _record_step(rows: int, strategy: FillStrategy) -> None:
    counters.steps += 1
    counters.rows += rows
    _count(strategy)


def _reasoning_ends(manager: StructuredOutputManager, request: Request) -> tuple[int, ...]:
    """The tokens a row that is still reasoning forbids, as the installed vLLM decides them."""
    if not installed_release().masks_reasoning_ends:
        return ()
    return manager._masked_reasoning_ends(request)  # type: ignore[attr-defined]


def _layout(manager: StructuredOutputManager, rows_per_request: list[int]) -> tuple[list[int], int]:
    """Each request's first row and the rows the step spans, as the installed vLLM lays them."""
    config = manager.vllm_config
    # vLLM's stride: the most scheduled positions a request can have, plus the bonus token.
    stride = config.num_speculative_tokens + (0 if config.model_config.is_diffusion else 1)
    layout = installed_release().mask_layout
    return layout.first_rows(rows_per_request, stride), layout.total_rows(rows_per_request, stride)


def _plan_rows(
    manager: StructuredOutputManager,
    requests: list[Request],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> tuple[list[_RequestRows], int]:
    diffusion = manager.vllm_config.model_config.is_diffusion
    drafts_per_request = [scheduled_spec_decode_tokens.get(r.request_id, []) for r in requests]
    # Diffusion models sample no bonus token after their scheduled positions.
    rows_per_request = [len(d) + (0 if diffusion and d else 1) for d in drafts_per_request]
    first_rows, num_rows = _layout(manager, rows_per_request)
    runs = []
    for request, drafts, rows, first_row in zip(
        requests, drafts_per_request, rows_per_request, first_rows, strict=True
    ):
        grammar_start, constraint_start = manager._get_constraint_bounds(
            request, strip_speculative_padding(drafts)
        )
        structured = request.structured_output_request
        assert structured is not None
        runs.append(
            _RequestRows(
                request_id=request.request_id,
                grammar=structured.grammar,  # type: ignore[arg-type]
                drafts=drafts,
                first_row=first_row,
                num_rows=rows,
                grammar_start=grammar_start,
                constraint_start=constraint_start,
                reasoning_ends=_reasoning_ends(manager, request) if constraint_start else (),
            )
        )
    return runs, num_rows


def _step_bitmask(manager: StructuredOutputManager) -> torch.Tensor:
    """vLLM's bitmask buffer, allocated as vLLM sizes it if this is the first step."""
    if manager._grammar_bitmask is None:
        assert manager.backend is not None
        rows_per_request = 1 + manager.vllm_config.num_speculative_tokens
        manager._grammar_bitmask = manager.backend.allocate_token_bitmask(
            manager.vllm_config.scheduler_config.max_num_seqs * rows_per_request
        )
    return manager._grammar_bitmask


def _filler(manager: StructuredOutputManager) -> BitmaskFiller:
    return cached_state(manager, FILLER_STATE, BitmaskFiller)
