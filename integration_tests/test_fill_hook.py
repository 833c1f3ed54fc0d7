"""The bitmask fill hook inside a real in-process engine."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from harness.oracles import assert_valid_prefix

from grammar_guard.core.masks.fill import BitmaskFiller, FillStrategy
from grammar_guard.vllm_adapter import fill_hook
from grammar_guard.vllm_adapter.patching import plugin_state

if TYPE_CHECKING:
    from vllm import LLM, RequestOutput

pytestmark = pytest.mark.engine

# Closed, so that a finished output holds exactly the required names.
SIMPLE_SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
    "required": ["color", "n"],
    "additionalProperties": False,
}
LONG_TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 300}},
    "required": ["text"],
    "additionalProperties": False,
}
# Seven simple requests and one that stays inside a long bounded string.
SCHEMAS = [SIMPLE_SCHEMA] * 7 + [LONG_TEXT_SCHEMA]
MAX_TOKENS = 40


def _generate(llm: LLM, *, temperature: float) -> list[RequestOutput]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = [
        SamplingParams(
            max_tokens=MAX_TOKENS,
            temperature=temperature,
            seed=seed,
            structured_outputs=StructuredOutputsParams(json=schema),
        )
        for seed, schema in enumerate(SCHEMAS)
    ]
    return llm.generate(["Answer: "] * len(params), params, use_tqdm=False)


def _assert_valid(outputs: list[RequestOutput]) -> None:
    for schema, output in zip(SCHEMAS, outputs, strict=True):
        completion = output.outputs[0]
        if completion.finish_reason == "stop":
            value = json.loads(completion.text)
            assert set(value) == set(schema["required"]), completion.text
        else:
            assert_valid_prefix({"json": schema}, completion.text, compact=True)


def _manager(llm: LLM) -> Any:
    return llm.llm_engine.engine_core.engine_core.structured_output_manager


class _Clock:
    """Every fill appears to take ``step`` seconds, which forces the filler's choice."""

    def __init__(self, step: float) -> None:
        self._step = step
        self._now = 0.0

    def __call__(self) -> float:
        self._now += self._step
        return self._now


def test_a_mixed_batch_decodes_valid_output_through_the_hook(llm: LLM) -> None:
    steps, rows = fill_hook.counters.steps, fill_hook.counters.rows

    outputs = _generate(llm, temperature=1.0)

    _assert_valid(outputs)
    generated = sum(len(output.outputs[0].token_ids) for output in outputs)
    assert fill_hook.counters.steps > steps
    # The hook batched at least one step of all eight requests; steps left with
    # one request (and the engine's first step) are vLLM's direct fills, and no
    # row is filled twice.
    assert len(SCHEMAS) <= fill_hook.counters.rows - rows <= generated


def test_every_strategy_gives_the_same_greedy_output(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = plugin_state(_manager(llm))
    results = {}
    for strategy, step in ((FillStrategy.BATCH, 0.0), (FillStrategy.PARALLEL, 1.0)):
        filler = BitmaskFiller(threads=2, clock=_Clock(step))
        monkeypatch.setitem(state, fill_hook.FILLER_STATE, filler)
        used_before = fill_hook.counters.strategies.get(strategy, 0)
        results[strategy] = [o.outputs[0].token_ids for o in _generate(llm, temperature=0)]
        assert fill_hook.counters.strategies.get(strategy, 0) > used_before
    assert results[FillStrategy.BATCH] == results[FillStrategy.PARALLEL]
