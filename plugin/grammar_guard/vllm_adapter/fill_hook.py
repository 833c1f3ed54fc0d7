"""Fill grammar-guard's per-step bitmask with core's batch strategies.

vLLM's ``StructuredOutputManager.grammar_bitmask`` fills one row at a time
(a thread pool only beyond 128 requests and never with speculative decoding).
This hook replaces it for the grammar-guard backend alone; every other
backend runs vLLM's original.

Rows are laid out as vLLM lays them out: per request, one row per scheduled
draft token, then one for the bonus token (none after drafts for diffusion
models). Draft rows depend on the grammar state after the previous draft, so
the step runs in levels: level ``k`` fills row ``k`` of every request in one
batch, then advances each grammar by its ``k``-th draft. vLLM's own
``_get_constraint_bounds`` decides which rows are constrained (reasoning),
and its rules for padding (-1 drafts), terminated grammars and rejected
drafts (later rows repeat the last valid row) are kept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.logger import init_logger
from vllm.v1.structured_output import StructuredOutputManager
from vllm.v1.structured_output.utils import strip_speculative_padding

from grammar_guard.core.bitmask_fill import BitmaskFiller, FillStrategy, RowFill

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch
    from vllm.v1.request import Request

    from grammar_guard.vllm_adapter.backend import GuardedGrammar

logger = init_logger(__name__)

_FILLER_ATTRIBUTE = "_grammar_guard_filler"


@dataclass
class FillCounters:
    """What the hook did in this process: for tests and diagnostics."""

    steps: int = 0
    rows: int = 0
    strategies: dict[FillStrategy, int] = field(default_factory=dict)


counters = FillCounters()


def install_fill_hook() -> None:
    # Imported here: registration imports this module at its top.
    from grammar_guard.vllm_adapter.registration import _wrap_method

    _wrap_method(StructuredOutputManager, "grammar_bitmask", _bitmask_fill)


def _bitmask_fill(original: Callable[..., Any]) -> Callable[..., Any]:
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
class _RequestRows:
    """One request's rows in this step and its grammar's progress through its drafts."""

    request_id: str
    grammar: GuardedGrammar
    drafts: list[int]
    first_row: int
    num_rows: int
    grammar_start: int
    constraint_start: int
    advanced: int = 0
    padded: bool = False
    failed_row: int | None = None

    def stage(
        self, level: int, bitmask: torch.Tensor, fills: list[RowFill], allow_all: list[int]
    ) -> None:
        """Queue this request's row of ``level`` for filling, or settle it here."""
        row = self.first_row + level
        if self.failed_row is not None:
            bitmask[row].copy_(bitmask[self.failed_row])
        elif self.padded or level < self.constraint_start or self.grammar.is_terminated():
            allow_all.append(row)
        else:
            fills.append(RowFill(self.grammar, row))

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
        num_rows = _fill_with_drafts(manager, filler, bitmask, requests, drafts)
    else:
        num_rows = _fill_one_row_each(manager, filler, bitmask, requests)
    counters.steps += 1
    counters.rows += num_rows
    # A numpy view, as vLLM returns it: cheaper to send to the workers than a tensor.
    return bitmask[:num_rows].numpy()


def _fill_one_row_each(
    manager: StructuredOutputManager,
    filler: BitmaskFiller,
    bitmask: torch.Tensor,
    requests: list[Request],
) -> int:
    """The common step, without drafts: the level machinery would only cost time here."""
    fills: list[RowFill] = []
    allow_all: list[int] = []
    for row, request in enumerate(requests):
        grammar = request.structured_output_request.grammar  # type: ignore[union-attr]
        constrained = manager._get_constraint_bounds(request, ()).constraint_start == 0
        if constrained and not grammar.is_terminated():  # type: ignore[union-attr]
            fills.append(RowFill(grammar, row))  # type: ignore[arg-type]
        else:
            allow_all.append(row)
    _count(filler.fill(bitmask, fills, allow_all))
    return len(requests)


def _fill_with_drafts(
    manager: StructuredOutputManager,
    filler: BitmaskFiller,
    bitmask: torch.Tensor,
    requests: list[Request],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> int:
    runs = _plan_rows(manager, requests, scheduled_spec_decode_tokens)
    try:
        for level in range(max(run.num_rows for run in runs)):
            _fill_level(filler, bitmask, runs, level)
    finally:
        for run in runs:
            run.restore()
    return sum(run.num_rows for run in runs)


def _fill_level(
    filler: BitmaskFiller, bitmask: torch.Tensor, runs: list[_RequestRows], level: int
) -> None:
    fills: list[RowFill] = []
    allow_all: list[int] = []
    active = [run for run in runs if level < run.num_rows]
    for run in active:
        run.stage(level, bitmask, fills, allow_all)
    _count(filler.fill(bitmask, fills, allow_all))
    for run in active:
        run.advance(level)


def _count(strategy: FillStrategy) -> None:
    counters.strategies[strategy] = counters.strategies.get(strategy, 0) + 1


def _record_step(rows: int, strategy: FillStrategy) -> None:
    counters.steps += 1
    counters.rows += rows
    _count(strategy)


def _plan_rows(
    manager: StructuredOutputManager,
    requests: list[Request],
    scheduled_spec_decode_tokens: dict[str, list[int]],
) -> list[_RequestRows]:
    diffusion = manager.vllm_config.model_config.is_diffusion
    runs = []
    next_row = 0
    for request in requests:
        drafts = scheduled_spec_decode_tokens.get(request.request_id, [])
        grammar_start, constraint_start = manager._get_constraint_bounds(
            request, strip_speculative_padding(drafts)
        )
        # Diffusion models sample no bonus token after their scheduled positions.
        num_rows = len(drafts) + (0 if diffusion and drafts else 1)
        structured = request.structured_output_request
        assert structured is not None
        runs.append(
            _RequestRows(
                request_id=request.request_id,
                grammar=structured.grammar,  # type: ignore[arg-type]
                drafts=drafts,
                first_row=next_row,
                num_rows=num_rows,
                grammar_start=grammar_start,
                constraint_start=constraint_start,
            )
        )
        next_row += num_rows
    return runs


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
    filler: BitmaskFiller | None = getattr(manager, _FILLER_ATTRIBUTE, None)
    if filler is None:
        filler = BitmaskFiller()
        setattr(manager, _FILLER_ATTRIBUTE, filler)
    return filler
