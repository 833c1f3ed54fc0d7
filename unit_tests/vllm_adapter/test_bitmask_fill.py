"""The vLLM fill hook against vLLM's own grammar_bitmask, and the V2 runner reading its rows.

The filler's strategies are core, tested without vLLM in
unit_tests/core/masks/test_fill_strategies.py, whose grammars and reference
loop these tests use.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
import torch
from harness.skip_policy import UNAVAILABLE_HERE
from unit_tests.core.masks.test_fill_strategies import (
    BOUNDED_TEXT,
    filled_row_by_row,
    grammar_at,
)
from vllm.v1.structured_output import ConstraintBounds, StructuredOutputManager

from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.vllm_adapter import fill_hook
from grammar_guard.vllm_adapter.backend import GrammarGuardBackend, GuardedGrammar
from grammar_guard.vllm_adapter.compat import installed_release

if TYPE_CHECKING:
    from conftest import SmallTokenizer

# --- the vLLM hook against vLLM's own grammar_bitmask ------------------------------------
# Seam tests: they also run against vLLM 0.33, whose rows are laid out in fixed
# blocks and whose reasoning rows forbid the implicit reasoning ends.

DRAFT_CASES: tuple[tuple[str, str, list[str | int], ConstraintBounds], ...] = (
    # request id, grammar prefix, scheduled drafts, (grammar_start, constraint_start)
    ("plain", '{"text":"a', [], ConstraintBounds(0, 0)),
    ("drafts", '{"text":"', ["a", "b", "c"], ConstraintBounds(0, 0)),
    ("rejected", '{"text":"', ["a", "{", "b"], ConstraintBounds(0, 0)),
    ("padded", '{"text":"', ["a", -1, -1], ConstraintBounds(0, 0)),
    ("ends", '{"text":"ab', ['"', "}", "a"], ConstraintBounds(0, 0)),
    ("reasoning", "", ["x", "y", "{"], ConstraintBounds(2, 2)),
    ("implicit-end", "", ["x", "{", '"'], ConstraintBounds(1, 2)),
    ("still-reasoning", "", ["x", "y"], ConstraintBounds(3, 3)),
    ("terminated", '{"text":"ab"}</s>', ["a"], ConstraintBounds(0, 0)),
)


def _draft_ids(small: SmallTokenizer, drafts: list[str | int]) -> list[int]:
    return [small.id(d) if isinstance(d, str) else d for d in drafts]


def _text_grammar(small: SmallTokenizer, prefix: str) -> GuardedGrammar:
    grammar = grammar_at(small, BOUNDED_TEXT, "", GuardedGrammar)
    tokens = small.ids(prefix.removesuffix("</s>"))
    if prefix.endswith("</s>"):
        tokens.append(small.eos)
    assert grammar.accept_tokens("r", tokens)
    return grammar


def _reasoning_ends(small: SmallTokenizer, bounds: ConstraintBounds) -> tuple[int, ...]:
    """What vLLM 0.33's ``_masked_reasoning_ends`` finds: ends the grammar cannot begin with."""
    return (small.id("x"), small.id("{"), small.eos) if bounds.constraint_start else ()


def _manager(
    small: SmallTokenizer, cases: Sequence[tuple[str, str, Any, ConstraintBounds]], diffusion: bool
) -> tuple[StructuredOutputManager, dict[str, Any]]:
    backend = object.__new__(GrammarGuardBackend)  # a real backend's type, none of its state
    backend.vocab_size = len(small.vocab)
    manager = object.__new__(StructuredOutputManager)
    manager.backend = backend
    manager.vllm_config = SimpleNamespace(  # type: ignore[assignment]
        num_speculative_tokens=3,
        scheduler_config=SimpleNamespace(max_num_seqs=len(cases)),
        model_config=SimpleNamespace(is_diffusion=diffusion),
    )
    # As vLLM leaves it after its first step; before that step the hook runs vLLM unchanged.
    manager._grammar_bitmask = backend.allocate_token_bitmask(len(cases) * (1 + 3))
    manager._full_mask = torch.tensor(-1, dtype=torch.int32)
    manager.fill_bitmask_parallel_threshold = 128
    bounds = {request_id: bound for request_id, _, _, bound in cases}
    manager._get_constraint_bounds = (  # type: ignore[method-assign]
        lambda request, spec_tokens, spec_tokens_committed=False: bounds[request.request_id]
    )
    requests = {
        request_id: SimpleNamespace(
            request_id=request_id,
            structured_output_request=SimpleNamespace(
                grammar=_text_grammar(small, prefix),
                # vLLM 0.33 computes this once per request and reads it from here.
                masked_reasoning_end_ids=_reasoning_ends(small, bound),
            ),
        )
        for request_id, prefix, _, bound in cases
    }
    return manager, requests


def _original() -> Callable[..., Any]:
    method = StructuredOutputManager.grammar_bitmask
    return getattr(method, "__wrapped__", method)


def _run_step(
    small: SmallTokenizer,
    cases: Sequence[tuple[str, str, list[str | int], ConstraintBounds]],
    function: Callable[..., Any],
    diffusion: bool,
    configure: Callable[[StructuredOutputManager], None] = lambda manager: None,
) -> tuple[Any, list[GuardedGrammar]]:
    manager, requests = _manager(small, cases, diffusion)
    configure(manager)
    drafts = {request_id: _draft_ids(small, d) for request_id, _, d, _ in cases if d}
    result = function(manager, requests, [case[0] for case in cases], drafts)
    return result, [request.structured_output_request.grammar for request in requests.values()]


@pytest.mark.seam
@pytest.mark.parametrize("diffusion", [False, True])
def test_hook_fills_what_vllm_fills_with_drafts_reasoning_and_terminated_grammars(
    small: SmallTokenizer, diffusion: bool
) -> None:
    expected, expected_grammars = _run_step(small, DRAFT_CASES, _original(), diffusion)
    steps_before = fill_hook.counters.steps

    actual, grammars = _run_step(small, DRAFT_CASES, fill_hook.bitmask_fill(_original()), diffusion)

    # A step with drafts is vLLM's loop with direct fills: a queue would flush row by row.
    assert fill_hook.counters.steps == steps_before
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert (actual == expected).all()
    # Drafts were rolled back exactly as vLLM rolls them back.
    assert filled_row_by_row(grammars, len(small.vocab)).equal(
        filled_row_by_row(expected_grammars, len(small.vocab))
    )
    assert [g.is_terminated() for g in grammars] == [g.is_terminated() for g in expected_grammars]


def _queued_step(manager: StructuredOutputManager, *arguments: Any) -> Any:
    with fill_hook.queued_rows(manager, manager._grammar_bitmask):
        return _original()(manager, *arguments)


@pytest.mark.seam
@pytest.mark.parametrize("diffusion", [False, True])
def test_rows_queued_through_drafts_are_filled_before_each_grammar_moves(
    small: SmallTokenizer, diffusion: bool
) -> None:
    """The queue's safety rule: a grammar whose state moves flushes its queued rows first.

    The hook does not queue steps with drafts; were a release to move grammars
    in a step it queues, vLLM's rows would still be kept exactly.
    """
    expected, expected_grammars = _run_step(small, DRAFT_CASES, _original(), diffusion)
    rows_before = fill_hook.counters.rows

    actual, grammars = _run_step(small, DRAFT_CASES, _queued_step, diffusion)

    assert fill_hook.counters.rows > rows_before
    assert (actual == expected).all()
    assert filled_row_by_row(grammars, len(small.vocab)).equal(
        filled_row_by_row(expected_grammars, len(small.vocab))
    )


@pytest.mark.seam
def test_the_first_step_allocates_and_fills_as_vllm_does(small: SmallTokenizer) -> None:
    expected, _ = _run_step(small, DRAFT_CASES, _original(), diffusion=False)
    steps_before = fill_hook.counters.steps
    manager, requests = _manager(small, DRAFT_CASES, diffusion=False)
    manager._grammar_bitmask = None
    drafts = {request_id: _draft_ids(small, d) for request_id, _, d, _ in DRAFT_CASES if d}

    actual = fill_hook.bitmask_fill(_original())(
        manager, requests, [case[0] for case in DRAFT_CASES], drafts
    )

    assert fill_hook.counters.steps == steps_before
    assert manager._grammar_bitmask is not None
    assert (actual == expected).all()


@pytest.mark.seam
def test_a_step_without_drafts_fills_every_grammar_row_in_one_batch(
    small: SmallTokenizer,
) -> None:
    cases = [(request_id, prefix, [], bounds) for request_id, prefix, _, bounds in DRAFT_CASES]
    rows_before = fill_hook.counters.rows
    batches_before = sum(fill_hook.counters.strategies.values())
    _run_step(small, cases, fill_hook.bitmask_fill(_original()), diffusion=False)
    # Every case but the terminated one and the three still reasoning has a grammar row.
    assert fill_hook.counters.rows - rows_before == len(cases) - 4
    assert sum(fill_hook.counters.strategies.values()) == batches_before + 1


@pytest.mark.seam
def test_hook_fills_what_vllm_fills_in_steps_without_drafts(small: SmallTokenizer) -> None:
    cases = [(request_id, prefix, [], bounds) for request_id, prefix, _, bounds in DRAFT_CASES]
    expected, _ = _run_step(small, cases, _original(), diffusion=False)
    actual, _ = _run_step(small, cases, fill_hook.bitmask_fill(_original()), diffusion=False)
    # Three drafts are configured: a 0.33 block is four rows even in a step without drafts.
    layout = installed_release().mask_layout
    num_rows = layout.total_rows(np.ones(len(cases), dtype=np.int64), 4)
    assert actual.shape == expected.shape == (num_rows, expected.shape[1])
    assert (actual == expected).all()


def _allowed_tokens(bitmask: np.ndarray, vocab_size: int) -> list[set[int]]:
    bits = (bitmask.astype(np.int64)[:, :, None] >> np.arange(32)) & 1
    flat = bits.reshape(bitmask.shape[0], -1)[:, :vocab_size]
    return [set(np.flatnonzero(row).tolist()) for row in flat]


@pytest.mark.seam
@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_hook_row_layout_follows_the_request_order(
    small: SmallTokenizer, order: tuple[int, ...]
) -> None:
    # Without drafts, so the hook queues the step.
    cases = [(case[0], case[1], [], case[3]) for case in (DRAFT_CASES[i] for i in (1, 0, 4))]
    cases = [cases[i] for i in order]
    expected, _ = _run_step(small, cases, _original(), diffusion=False)
    steps_before = fill_hook.counters.steps
    actual, _ = _run_step(small, cases, fill_hook.bitmask_fill(_original()), diffusion=False)
    assert fill_hook.counters.steps == steps_before + 1
    assert (actual == expected).all()


def _fill_threads(manager: StructuredOutputManager) -> None:
    """vLLM's own fill threads, which it uses past a batch size, and only without drafts."""
    manager.vllm_config.num_speculative_tokens = 0  # type: ignore[misc]
    manager.fill_bitmask_parallel_threshold = 2
    manager.fill_bitmask_parallel_batch_size = 2
    manager.executor_for_fillmask = ThreadPoolExecutor(max_workers=2)


@pytest.mark.seam
def test_rows_queued_from_vllms_fill_threads_are_filled_as_vllm_fills_them(
    small: SmallTokenizer,
) -> None:
    cases = [(request_id, prefix, [], bounds) for request_id, prefix, _, bounds in DRAFT_CASES]
    expected, _ = _run_step(small, cases, _original(), diffusion=False, configure=_fill_threads)
    rows_before = fill_hook.counters.rows
    hook = fill_hook.bitmask_fill(_original())
    actual, _ = _run_step(small, cases, hook, diffusion=False, configure=_fill_threads)
    assert fill_hook.counters.rows - rows_before == len(cases) - 4  # as in one batch, above
    assert actual.shape == expected.shape == (len(cases), expected.shape[1])
    assert (actual == expected).all()


@pytest.mark.seam
def test_other_backends_and_empty_batches_run_vllm_unchanged() -> None:
    calls: list[tuple[Any, ...]] = []

    def original(*args: Any) -> str:
        calls.append(args)
        return "original"

    hook = fill_hook.bitmask_fill(original)
    buffer = torch.zeros((4, 1), dtype=torch.int32)
    other = SimpleNamespace(backend=object(), _grammar_bitmask=buffer)
    ours = SimpleNamespace(backend=object.__new__(GrammarGuardBackend), _grammar_bitmask=buffer)

    assert hook(other, {}, ["r"], {}) == "original"
    assert hook(ours, {}, [], {}) == "original"
    assert len(calls) == 2


@pytest.mark.seam
def test_install_wraps_once() -> None:
    from grammar_guard.vllm_adapter.patching import is_patched
    from grammar_guard.vllm_adapter.registration import install, installed_patches

    install()
    wrapped = StructuredOutputManager.grammar_bitmask
    install()
    assert installed_patches()["bitmask_fill"]
    assert StructuredOutputManager.grammar_bitmask is wrapped
    assert not is_patched(wrapped.__wrapped__)  # type: ignore[attr-defined]


# --- the V2 model runner reads the hook's rows --------------------------------------------
# The V2 runner (vllm/v1/worker/gpu/) applies the mask itself; its mapping from
# mask rows to (request, position) is pure Python and runs here as vLLM wrote
# it. Only its CUDA side is stood in for: the copy streams and pinned staging
# (no-ops on CPU tensors) and the Triton kernel, reproduced below from its source.


class _V2Kernel:
    """``_apply_grammar_bitmask_kernel[grid](...)``: mask row ``i`` goes to request
    ``mapping[i] // MASK_STRIDE``, position ``mapping[i] % MASK_STRIDE``, if the
    request has that many logits rows (``cu_num_logits``)."""

    def __getitem__(self, grid: tuple[int, int]) -> Callable[..., None]:
        return self.run

    @staticmethod
    def run(
        logits: torch.Tensor,
        logits_stride: int,
        logits_indices: torch.Tensor,
        cu_num_logits: torch.Tensor,
        bitmask: torch.Tensor,
        bitmask_stride: int,
        vocab_size: int,
        MASK_STRIDE: int,
        BLOCK_SIZE: int,
    ) -> None:
        allowed = _allowed_tokens(bitmask.numpy(), vocab_size)
        for mask_row, mapping in enumerate(logits_indices.tolist()):
            request, position = divmod(mapping, MASK_STRIDE)
            start, end = cu_num_logits[request].item(), cu_num_logits[request + 1].item()
            if position < end - start:
                forbidden = sorted(set(range(vocab_size)) - allowed[mask_row])
                logits[start + position, forbidden] = float("-inf")


class _NoStream:
    def wait_stream(self, stream: object) -> None:
        pass


@pytest.fixture
def v2_worker(monkeypatch: pytest.MonkeyPatch) -> Callable[[int, int], Any]:
    from vllm.utils import torch_utils
    from vllm.v1.worker.gpu import structured_outputs as v2

    for module in (torch_utils, v2):  # a CUDA build of torch pins host copies when it can
        monkeypatch.setattr(module, "PIN_MEMORY", False)
    monkeypatch.setattr(torch.cuda, "Stream", _NoStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", _NoStream)
    monkeypatch.setattr(v2, "_apply_grammar_bitmask_kernel", _V2Kernel())

    def build(max_num_reqs: int, vocab_size: int) -> Any:
        # As the V2 runner builds it, with the arguments this release's worker takes.
        decode_query_len = 1 + SPEC_TOKENS
        arguments = {
            "max_num_logits": max_num_reqs * decode_query_len,
            "vocab_size": vocab_size,
            "device": torch.device("cpu"),
            "mask_stride": decode_query_len,
            "num_bonus_tokens": 1,
        }
        accepted = inspect.signature(v2.StructuredOutputsWorker).parameters
        return v2.StructuredOutputsWorker(**{k: v for k, v in arguments.items() if k in accepted})

    return build


SPEC_TOKENS = 3
# Grammar requests in scheduler order; the batch holds them in another order
# plus one request without a grammar.
V2_CASES: tuple[tuple[str, str, list[str | int], ConstraintBounds], ...] = (
    ("three-drafts", '{"text":"', ["a", "b", "c"], ConstraintBounds(0, 0)),
    ("no-drafts", '{"text":"ab', [], ConstraintBounds(0, 0)),
    ("one-draft", "", ["{"], ConstraintBounds(0, 0)),
)
V2_BATCH = ("one-draft", "free", "three-drafts", "no-drafts")
V2_FREE_DRAFTS = 2


def _expected_rows(small: SmallTokenizer, prefix: str, drafts: list[int]) -> list[set[int]]:
    """The tokens allowed at each position: the grammar after the drafts before it."""
    rows = []
    for position in range(len(drafts) + 1):
        grammar = _text_grammar(small, prefix)
        assert grammar.accept_tokens("r", drafts[:position])
        bitmask = allocate_bitmask(1, len(small.vocab))
        grammar.fill_bitmask(bitmask, 0)
        rows.append(_allowed_tokens(bitmask.numpy(), len(small.vocab))[0])
    return rows


@pytest.fixture
def cpu_worker() -> Callable[[int, int], Any]:
    """vLLM 0.34's pure-torch CPU apply, as its CPU model runner builds it without Triton."""
    cpu = pytest.importorskip(
        "vllm.v1.worker.cpu.structured_outputs",
        reason=UNAVAILABLE_HERE + "this vLLM has no V2 CPU model runner (it came with 0.34)",
    )

    def build(max_num_reqs: int, vocab_size: int) -> Any:
        decode_query_len = 1 + SPEC_TOKENS
        return cpu.CPUStructuredOutputsWorker(
            max_num_logits=max_num_reqs * decode_query_len,
            vocab_size=vocab_size,
            device=torch.device("cpu"),
            mask_stride=decode_query_len,
        )

    return build


@pytest.mark.seam
@pytest.mark.parametrize("filled_by", ["vllm", "grammar-guard"])
@pytest.mark.parametrize("worker", ["v2_worker", "cpu_worker"])
def test_the_v2_runner_masks_each_position_with_its_own_row(
    small: SmallTokenizer, request: pytest.FixtureRequest, worker: str, filled_by: str
) -> None:
    """The rows of one step with drafts, applied by vLLM's own V2 code to real logits.

    ``v2_worker`` is the CUDA worker with its kernel stood in for; ``cpu_worker``
    is vLLM 0.34's pure-torch CPU worker, run as it is.
    """
    build_worker: Callable[[int, int], Any] = request.getfixturevalue(worker)
    fill = _original() if filled_by == "vllm" else fill_hook.bitmask_fill(_original())
    bitmask, _ = _run_step(small, V2_CASES, fill, diffusion=False)
    drafts = {request_id: _draft_ids(small, d) for request_id, _, d, _ in V2_CASES}
    drafts["free"] = [0] * V2_FREE_DRAFTS
    num_logits = np.array([1 + len(drafts[request_id]) for request_id in V2_BATCH])
    cu_num_logits = np.concatenate([[0], np.cumsum(num_logits)]).astype(np.int32)
    input_batch = SimpleNamespace(
        req_ids=list(V2_BATCH),
        cu_num_logits_np=cu_num_logits,
        cu_num_logits=torch.from_numpy(cu_num_logits),
        num_draft_tokens_per_req=num_logits - 1,
    )
    vocab_size = len(small.vocab)
    logits = torch.zeros((int(cu_num_logits[-1]), vocab_size))

    build_worker(len(V2_BATCH), vocab_size).apply_grammar_bitmask(
        logits, input_batch, [case[0] for case in V2_CASES], bitmask
    )

    allowed = [set(np.flatnonzero(row.isfinite().numpy()).tolist()) for row in logits]
    for request_id, prefix, _, _ in V2_CASES:
        start = int(cu_num_logits[V2_BATCH.index(request_id)])
        expected = _expected_rows(small, prefix, drafts[request_id])
        assert allowed[start : start + len(expected)] == expected, request_id
    free = int(cu_num_logits[V2_BATCH.index("free")])
    assert allowed[free : free + 1 + V2_FREE_DRAFTS] == [set(range(vocab_size))] * 3
