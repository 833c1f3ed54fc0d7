"""Every request kind through ``LLM.generate`` on a real in-process vLLM engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from harness.oracles import assert_satisfies, assert_valid_prefix

import grammar_guard
from grammar_guard.demo.cases import CASES, PERSON_SCHEMA, Case

if TYPE_CHECKING:
    from vllm import LLM, RequestOutput

pytestmark = pytest.mark.engine

SEEDS = (1, 2, 3)
PROMPT = "Answer: "


def _params(structured_outputs: dict[str, Any] | None, *, seed: int, max_tokens: int = 64) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
        structured_outputs=StructuredOutputsParams(**structured_outputs)
        if structured_outputs
        else None,
    )


def _generate(llm: LLM, params: list[Any]) -> list[RequestOutput]:
    return llm.generate([PROMPT] * len(params), params, use_tqdm=False)


def _structured_output_manager(llm: LLM) -> Any:
    return llm.llm_engine.engine_core.engine_core.structured_output_manager


def _backend(llm: LLM) -> Any:
    """The engine's grammar-guard backend, built by a first structured request if needed."""
    manager = _structured_output_manager(llm)
    if manager.backend is None:
        _generate(llm, [_params({"regex": "[a-z]"}, seed=0)])
    return manager.backend


@pytest.fixture(scope="module")
def case_outputs(llm: LLM) -> dict[tuple[str, int], RequestOutput]:
    """All kinds and seeds in one batch: they share decode steps, as in serving."""
    keys = [(case.name, seed) for case in CASES for seed in SEEDS]
    params = [_params(case.structured_outputs, seed=seed) for case in CASES for seed in SEEDS]
    return dict(zip(keys, _generate(llm, params), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_kind_satisfies_its_constraint(
    case: Case, case_outputs: dict[tuple[str, int], RequestOutput]
) -> None:
    for seed in SEEDS:
        completion = case_outputs[(case.name, seed)].outputs[0]
        assert_satisfies(case, completion.text, completion.finish_reason, compact=True)


def test_engine_built_the_grammar_guard_backend(llm: LLM) -> None:
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    assert isinstance(_backend(llm), GrammarGuardBackend)


def test_json_object_is_an_object_or_a_valid_prefix(llm: LLM) -> None:
    import json

    outputs = _generate(llm, [_params({"json_object": True}, seed=seed) for seed in SEEDS])
    for output in outputs:
        completion = output.outputs[0]
        if completion.finish_reason == "stop":
            assert isinstance(json.loads(completion.text), dict)
        else:
            assert_valid_prefix({"json_object": True}, completion.text, compact=True)


def test_output_cut_by_max_tokens_is_a_valid_prefix(llm: LLM) -> None:
    outputs = _generate(
        llm, [_params({"json": PERSON_SCHEMA}, seed=seed, max_tokens=6) for seed in SEEDS]
    )
    for output in outputs:
        completion = output.outputs[0]
        assert completion.finish_reason == "length"
        assert_valid_prefix({"json": PERSON_SCHEMA}, completion.text, compact=True)


def test_whitespace_variants_of_a_schema_share_one_compiled_grammar(llm: LLM) -> None:
    import json

    schema = {
        "type": "object",
        "properties": {"k": {"enum": ["p", "q"]}},
        "required": ["k"],
        "additionalProperties": False,  # closed: the random model finishes within max_tokens
    }
    spaced = json.dumps(schema, indent=4)
    compact = json.dumps(schema, separators=(",", ":"))
    backend = _backend(llm)
    before = len(backend.cache)
    outputs = _generate(
        llm, [_params({"json": spaced}, seed=1), _params({"json": compact}, seed=2)]
    )
    assert len(backend.cache) == before + 1
    for output in outputs:
        assert json.loads(output.outputs[0].text)["k"] in ("p", "q")


def test_requests_without_a_grammar_are_untouched(llm: LLM) -> None:
    plain = _params(None, seed=7, max_tokens=24)
    alone = _generate(llm, [plain])[0].outputs[0]
    mixed = _generate(llm, [_params(CASES[0].structured_outputs, seed=1), plain])[1].outputs[0]
    assert alone.finish_reason == "length"
    assert mixed.token_ids == alone.token_ids


_JSON = "Failed to transform json schema into a grammar"
_REGEX = "Failed to transform regex into a grammar"
_GRAMMAR = "Invalid grammar specification"
# Each with the phrase vLLM's own backend starts that refusal with, then the reason.
BAD_REQUESTS = [
    pytest.param({"json": '{"type": "objectx"}'}, _JSON, "objectx", id="unknown-type"),
    pytest.param({"json": '{"type": "object",'}, _JSON, "not valid JSON", id="malformed-json"),
    pytest.param({"regex": "(ab"}, _REGEX, "parenthesis", id="unclosed-regex"),
    pytest.param({"grammar": "root ::= missing"}, _GRAMMAR, "missing", id="undefined-ebnf-rule"),
    pytest.param({"grammar": "start: nowhere"}, _GRAMMAR, "nowhere", id="undefined-lark-rule"),
    pytest.param({"regex": "a\x00b"}, _REGEX, "U+0000", id="nul-byte"),
    pytest.param({"json": "[" * 5000 + "]" * 5000}, _JSON, "nested", id="deep-nesting"),
    pytest.param(
        {"choice": []}, "Failed to transform choices into a grammar", "choice", id="empty-choice"
    ),
    pytest.param(
        {"structural_tag": '{"type": "structural_tag"}'},
        "Invalid structural tag specification",
        "structural_tag",
        id="bad-tag",
    ),
]


@pytest.mark.parametrize(("structured_outputs", "phrase", "reason"), BAD_REQUESTS)
def test_bad_input_is_refused_with_its_reason_and_the_engine_keeps_serving(
    llm: LLM, structured_outputs: dict[str, Any], phrase: str, reason: str
) -> None:
    from vllm.exceptions import VLLMValidationError

    compiled_before = len(_backend(llm).cache)
    with pytest.raises(VLLMValidationError) as refused:
        _generate(llm, [_params(structured_outputs, seed=0)])
    assert str(refused.value).startswith(f"{phrase}: ")
    assert reason in str(refused.value)
    assert len(_backend(llm).cache) == compiled_before  # the engine never saw it
    assert len(str(refused.value)) < 600  # the input is never echoed back whole
    good = _generate(llm, [_params({"regex": r"[a-c]{3}"}, seed=0)])[0].outputs[0]
    assert good.finish_reason == "stop" and len(good.text) == 3


class _ExplodingMatcher:
    """Stands in for a grammar library that fails in the middle of decoding."""

    def __init__(self, step: str) -> None:
        self._step = step

    def __getattr__(self, name: str) -> Any:
        if name == self._step:
            raise RuntimeError(f"simulated native failure in {name}")
        raise AttributeError(name)

    def accept_token(self, token_id: int) -> bool:
        self._fail("accept_token")
        return True

    def fill_bitmask(self, bitmask: Any, row: int) -> None:
        self._fail("fill_bitmask")

    def rollback(self, num_tokens: int) -> None:
        self._fail("rollback")

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        self._fail("reset")

    def _fail(self, name: str) -> None:
        if name == self._step:
            raise RuntimeError(f"simulated native failure in {name}")


@pytest.mark.parametrize("step", ["fill_bitmask", "accept_token"])
def test_a_grammar_fault_mid_decode_ends_only_its_own_request(
    llm: LLM, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    poisoned_regex = r"boom[0-9]{4}"
    original = GrammarGuardBackend._grammar_for

    def grammar_with_fault(self: Any, spec: Any, *args: Any) -> Any:
        grammar = original(self, spec, *args)
        if spec.text == poisoned_regex:
            grammar._matcher = _ExplodingMatcher(step)
        return grammar

    monkeypatch.setattr(GrammarGuardBackend, "_grammar_for", grammar_with_fault)
    healthy = [case for case in CASES if case.name in ("json_schema", "regex", "choice")]
    params = [_params(case.structured_outputs, seed=11) for case in healthy]
    outputs = _generate(llm, [*params, _params({"regex": poisoned_regex}, seed=11)])
    for case, output in zip(healthy, outputs, strict=False):
        completion = output.outputs[0]
        assert_satisfies(case, completion.text, completion.finish_reason, compact=True)
    poisoned = outputs[-1].outputs[0]
    assert poisoned.finish_reason == "error"
    # The reason travels with the output: offline users read it there.
    assert str(poisoned.stop_reason).startswith("grammar-guard:internal: grammar regex"), poisoned
    assert "grammar failed" in str(poisoned.stop_reason)
    assert len(poisoned.token_ids) <= 1
    monkeypatch.undo()
    again = _generate(llm, [_params({"regex": r"[x-z]{2}"}, seed=3)])[0].outputs[0]
    assert again.finish_reason == "stop" and len(again.text) == 2


def test_a_compile_failure_in_the_engine_fails_only_its_own_request(
    llm: LLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = CASES[2]
    cache = _backend(llm).cache
    poisoned_regex = r"crash[0-9]{3}"
    original = cache._compile_fn

    crashes: list[Any] = []

    def compile_or_crash(spec: Any) -> Any:
        if spec.text == poisoned_regex:
            crashes.append(spec)
            raise MemoryError("simulated compiler crash")
        return original(spec)

    monkeypatch.setattr(cache, "_compile_fn", compile_or_crash)
    outputs = _generate(
        llm,
        [_params(healthy.structured_outputs, seed=5), _params({"regex": poisoned_regex}, seed=5)],
    )
    good, bad = (output.outputs[0] for output in outputs)
    assert_satisfies(healthy, good.text, good.finish_reason, compact=True)
    assert bad.finish_reason == "error" and bad.text == ""
    assert bad.stop_reason == (
        "grammar-guard:invalid: grammar compile failed: MemoryError: simulated compiler crash"
    )
    # The failure is cached like an invalid grammar: the same request again is
    # refused without a second compile.
    errors_before = grammar_guard.metrics_snapshot()["grammar_guard_compile_errors_total"]
    again = _generate(llm, [_params({"regex": poisoned_regex}, seed=6)])[0].outputs[0]
    assert again.finish_reason == "error" and len(crashes) == 1
    assert grammar_guard.metrics_snapshot()["grammar_guard_compile_errors_total"] == errors_before
