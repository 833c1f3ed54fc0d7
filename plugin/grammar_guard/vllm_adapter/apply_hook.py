"""Apply grammar bitmasks in the V1 model runner with the plugin's kernel, for grammar-guard.

vLLM's V1 model runner calls ``apply_grammar_bitmask`` (imported by name into
``vllm.v1.worker.gpu_model_runner``) after every forward pass that has
structured requests. vLLM's version rebuilds a full-batch mask with a Python
loop per request and a new tensor each step, and on CPU round-trips 16-bit
logits through float32. Two patches replace it for grammar-guard engines only:

1. ``GPUModelRunner.sample_tokens`` (the one caller; the CPU runner inherits
   it) records, for the duration of the call, which runner is sampling. The
   runner's own ``vllm_config`` says which backend its engine uses, so two
   engines in one process (one grammar-guard, one xgrammar) each get theirs.
   ``get_current_vllm_config()`` is not set in the worker at that point.
2. The module-level name ``apply_grammar_bitmask`` in the runner module: for a
   grammar-guard runner, the mask rows are put in batch order with numpy and
   applied by :class:`~grammar_guard.core.masks.apply.BitmaskApplier`;
   every other runner gets vLLM's function unchanged.

The V1 runner is the one vLLM's CPU build runs, and the one a CUDA build runs
with ``VLLM_USE_V2_MODEL_RUNNER=0`` or for a feature the V2 runner lacks. The
V2 runner (``vllm/v1/worker/gpu/``, the CUDA default where Triton is present)
is not patched: it already applies the mask with one Triton kernel from
static buffers and resolves each request's logits rows on the device, which
its adaptive draft verification needs; it reads the rows vLLM's own
``grammar_bitmask`` lays out, which the fill hook only batches. vLLM 0.34
deleted the V1 runner, so there this module is never imported
(docs/vllm-integration.md, "Which code applies the mask").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

from grammar_guard import BACKEND_NAME
from grammar_guard.core.masks.apply import BitmaskApplier
from grammar_guard.core.masks.layout import BITS_PER_WORD
from grammar_guard.vllm_adapter.compat import MaskLayout, installed_release
from grammar_guard.vllm_adapter.patching import cached_state

# The runner's RunnerApply in its plugin state, or None for a runner of another backend.
_RUNNER_STATE = "runner_apply"
_sampling_runner: ContextVar[RunnerApply | None] = ContextVar(
    "grammar_guard_sampling_runner", default=None
)
_counter_lock = threading.Lock()
_applied_steps = 0


def applied_steps() -> int:
    """Decode steps whose mask the plugin applied in this process (for tests and diagnostics)."""
    return _applied_steps


def record_sampling_runner(original: Callable[..., Any]) -> Callable[..., Any]:
    def sample_tokens(self: GPUModelRunner, grammar_output: Any) -> Any:
        token = _sampling_runner.set(_runner_apply(self))
        try:
            return original(self, grammar_output)
        finally:
            _sampling_runner.reset(token)

    return sample_tokens


def dispatch_apply(original: Callable[..., None]) -> Callable[..., None]:
    def apply_grammar_bitmask(
        scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: torch.Tensor
    ) -> None:
        runner_apply = _sampling_runner.get()
        if runner_apply is None:
            return original(scheduler_output, grammar_output, input_batch, logits)
        runner_apply.apply(scheduler_output, grammar_output, input_batch, logits)
        _count_step()

    return apply_grammar_bitmask


def _count_step() -> None:
    global _applied_steps
    with _counter_lock:
        _applied_steps += 1


def _runner_apply(runner: GPUModelRunner) -> RunnerApply | None:
    """The runner's apply state, or None when its engine uses another backend."""
    return cached_state(runner, _RUNNER_STATE, lambda: _new_runner_apply(runner))


def _new_runner_apply(runner: GPUModelRunner) -> RunnerApply | None:
    config = runner.vllm_config.structured_outputs_config
    if config is None or config.backend != BACKEND_NAME:
        return None
    return RunnerApply(runner.max_num_reqs * (1 + runner.num_spec_tokens))


@dataclass
class RunnerApply:
    """One runner's applier and the host buffer its mask rows are reordered into."""

    max_rows: int
    applier: BitmaskApplier | None = None
    ordered: np.ndarray = field(default_factory=lambda: np.empty((0, 0), dtype=np.int32))

    def apply(
        self, scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: torch.Tensor
    ) -> None:
        bitmask = grammar_output.grammar_bitmask
        logits_rows, mask_rows = mask_placement(
            input_batch.req_ids,
            input_batch.req_id_to_index,
            scheduler_output.scheduled_spec_decode_tokens,
            grammar_output.structured_output_request_ids,
            installed_release().mask_layout,
            bitmask.shape[0],
        )
        if not logits_rows:
            return
        # Batch order makes the CPU kernel's row runs as long as possible.
        in_batch_order = sorted(zip(logits_rows, mask_rows, strict=True))
        ordered = self._ordered_buffer(len(in_batch_order), bitmask.shape[1])
        np.take(bitmask, [mask_row for _, mask_row in in_batch_order], axis=0, out=ordered)
        applier = self._applier(logits, bitmask.shape[1])
        applier.apply(
            logits, torch.from_numpy(ordered), [logits_row for logits_row, _ in in_batch_order]
        )

    def _ordered_buffer(self, rows: int, words: int) -> np.ndarray:
        if self.ordered.shape[0] < rows or self.ordered.shape[1] != words:
            self.ordered = np.empty((max(rows, self.max_rows), words), dtype=np.int32)
        return self.ordered[:rows]

    def _applier(self, logits: torch.Tensor, words: int) -> BitmaskApplier:
        vocab_size = words * BITS_PER_WORD
        applier = self.applier
        if applier is None or applier.device != logits.device or applier.vocab_size != vocab_size:
            applier = BitmaskApplier(max(self.max_rows, logits.shape[0]), vocab_size, logits.device)
            self.applier = applier
        return applier


def mask_placement(
    batch_req_ids: list[str],
    req_id_to_index: dict[str, int],
    spec_tokens: dict[str, list[int]],
    grammar_req_ids: list[str],
    layout: MaskLayout,
    num_mask_rows: int,
) -> tuple[list[int], list[int]]:
    """(logits rows, mask rows): the pairs for every mask row that belongs to this batch.

    A request with ``k`` draft tokens owns ``1 + k`` consecutive logits rows
    (batch order) and as many mask rows (``grammar_req_ids`` order), which
    start where ``layout`` puts them; a block's stride is what vLLM's own
    apply derives, the mask's rows per grammar request. A grammar request
    missing from the batch keeps its mask rows but gets none applied, as in vLLM.
    Plain Python: at the batch sizes where a step is cheap, NumPy's per-call
    cost would be most of this.
    """
    if not batch_req_ids or not grammar_req_ids:
        return [], []
    drafts = [0] * len(batch_req_ids)
    for req_id, tokens in spec_tokens.items():
        index = req_id_to_index.get(req_id)
        if index is not None:
            drafts[index] = len(tokens)
    # The logits hold each request's rows right after the previous request's.
    logits_start = MaskLayout.PACKED.first_rows([1 + d for d in drafts], 0)
    rows_per_request = [1 + len(spec_tokens.get(r, ())) for r in grammar_req_ids]
    mask_start = layout.first_rows(rows_per_request, num_mask_rows // len(grammar_req_ids))
    logits_rows: list[int] = []
    mask_rows: list[int] = []
    for req_id, rows, first_mask_row in zip(
        grammar_req_ids, rows_per_request, mask_start, strict=True
    ):
        index = req_id_to_index.get(req_id)
        if index is None:
            continue
        logits_rows.extend(range(logits_start[index], logits_start[index] + rows))
        mask_rows.extend(range(first_mask_row, first_mask_row + rows))
    return logits_rows, mask_rows
