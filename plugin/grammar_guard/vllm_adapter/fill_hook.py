"""Batch the grammar rows of vLLM's own bitmask fill, for grammar-guard.

vLLM's ``StructuredOutputManager.grammar_bitmask`` decides every rule of a
step's bitmask: where each request's rows go, which rows are still reasoning
(and which reasoning ends they forbid), padding, terminated grammars, the
rows after a rejected draft, the bonus row. Every release so far changed some
of them, so this hook re-implements none. It only changes *when* a grammar
row is filled: during the call, :meth:`GuardedGrammar.fill_bitmask
<grammar_guard.vllm_adapter.backend.GuardedGrammar.fill_bitmask>` queues its
row instead of filling it, and the queue is filled in one batch by core's
:class:`~grammar_guard.core.masks.fill.BitmaskFiller` (native batch calls,
threads when the rows are costly) when vLLM's loop returns.

A queued row must be filled from the grammar state vLLM filled it in. vLLM
advances a grammar through its drafts between two of its rows, and may copy a
row it filled into later ones (a rejected draft on 0.32 and 0.33), always
after calling ``accept_tokens``; so a grammar flushes the queue before any
call that moves its state (:meth:`RowQueue.flush`).

Steps without drafts, the common case, fill every request's row in one
batch. A step with drafts would flush nearly every row alone, so it runs
vLLM's loop with direct fills, as does a step of one request: there the
queue is pure overhead. So does every other backend, and a step that finds
no bitmask buffer yet: vLLM allocates it in its first step, and the queue is
keyed by that buffer, so vLLM's sizing is not repeated here.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grammar_guard.core.masks.fill import BitmaskFiller, FillStrategy, FillTarget, RowFill
from grammar_guard.vllm_adapter.patching import cached_state

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

# The manager's filler, in its plugin state: it keeps the cost of the previous step.
FILLER_STATE = "bitmask_filler"


@dataclass
class FillCounters:
    """What the hook did in this process: for tests and diagnostics."""

    steps: int = 0
    rows: int = 0
    strategies: dict[FillStrategy, int] = field(default_factory=dict)


counters = FillCounters()


class RowQueue:
    """The grammar rows of one ``grammar_bitmask`` call that are not filled yet.

    vLLM fills from its scheduler thread and, for large batches without
    drafts, from its own fill threads: ``list.append`` is atomic, and the
    queue is flushed by the scheduler thread once those threads are done.
    """

    def __init__(self, bitmask: torch.Tensor, filler: BitmaskFiller) -> None:
        self.bitmask = bitmask
        self._filler = filler
        self._rows: list[RowFill] = []
        self._lock = threading.Lock()
        # While the filler runs, a grammar's fill_bitmask must fill, not queue again.
        self.flushing = False

    def add(self, target: FillTarget, row: int) -> None:
        self._rows.append(RowFill(target, row))

    def flush(self) -> None:
        """Fill every queued row from its grammar's current state."""
        with self._lock:
            rows, self._rows = self._rows, []
            if not rows:
                return
            self.flushing = True
            try:
                strategy = self._filler.fill(self.bitmask, rows)
            finally:
                self.flushing = False
            counters.rows += len(rows)
            counters.strategies[strategy] = counters.strategies.get(strategy, 0) + 1


# Open queues by the address of the bitmask buffer they fill: a grammar is
# handed the buffer, not the manager. One per engine in this process.
_open_queues: dict[int, RowQueue] = {}


def queue_for(bitmask: torch.Tensor) -> RowQueue | None:
    """The queue that takes rows of ``bitmask`` now, if a fill of it is in progress."""
    if not _open_queues:
        return None
    queue = _open_queues.get(bitmask.data_ptr())
    return None if queue is None or queue.flushing else queue


def bitmask_fill(original: Callable[..., Any]) -> Callable[..., Any]:
    def grammar_bitmask(
        self: StructuredOutputManager,
        requests: dict[str, Request],
        structured_output_request_ids: list[str],
        scheduled_spec_decode_tokens: dict[str, list[int]],
    ) -> npt.NDArray[np.int32] | None:
        arguments = (requests, structured_output_request_ids, scheduled_spec_decode_tokens)
        buffer = self._grammar_bitmask
        if (
            buffer is None
            or len(structured_output_request_ids) < 2
            or _has_drafts(structured_output_request_ids, scheduled_spec_decode_tokens)
            or not _is_grammar_guard(self)
        ):
            return original(self, *arguments)
        with queued_rows(self, buffer):
            bitmask = original(self, *arguments)
        counters.steps += 1
        return bitmask

    return grammar_bitmask


@contextlib.contextmanager
def queued_rows(manager: StructuredOutputManager, buffer: torch.Tensor) -> Iterator[None]:
    """Queue the grammar rows of ``buffer`` while the block runs, then fill them in one batch."""
    queue = RowQueue(buffer, _filler(manager))
    key = buffer.data_ptr()
    _open_queues[key] = queue
    try:
        yield
    finally:
        del _open_queues[key]
    queue.flush()


def _has_drafts(request_ids: list[str], drafts: dict[str, list[int]]) -> bool:
    # vLLM moves a grammar through its drafts between two of its rows, so each
    # row would be flushed alone: the queue would only add its own cost
    # (docs/benchmarks.md, "Bitmask fill").
    return bool(drafts) and any(drafts.get(request_id) for request_id in request_ids)


def _is_grammar_guard(manager: StructuredOutputManager) -> bool:
    return isinstance(manager.backend, _backend_type())


@functools.cache
def _backend_type() -> type:
    # Imported on first use, not with this module: registration imports this
    # module in every vLLM process, and the backend pulls in xgrammar.
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    return GrammarGuardBackend


def _filler(manager: StructuredOutputManager) -> BitmaskFiller:
    return cached_state(manager, FILLER_STATE, BitmaskFiller)
