"""Shared fixtures: a tiny real tokenizer for each grammar engine, so engine tests run in ms.

Every character the tests need is its own token, so a text is driven through a
matcher one character at a time; a few multi-character tokens (``yes``,
``</s>``, ``<eot>``) check that longer tokens work too.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import llguidance
import pytest
import xgrammar as xgr

from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.routing import route
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine, XGrammarMatcher
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

EOS = "</s>"
EOT = "<eot>"

VOCAB: tuple[str, ...] = (
    *'{}[]":,. \n\t\\<>/-_',
    *string.digits,
    *string.ascii_lowercase,
    "yes",
    "no",
    "true",
    EOS,
    EOT,
)

COMPACT = CompileOptions(any_whitespace=False)
DEFAULT = CompileOptions()


@dataclass(frozen=True)
class SmallTokenizer:
    """A real :class:`XGrammarEngine` over :data:`VOCAB` plus helpers to drive it."""

    engine: XGrammarEngine
    vocab: tuple[str, ...]

    @property
    def eos(self) -> int:
        return self.id(EOS)

    @property
    def eot(self) -> int:
        return self.id(EOT)

    def id(self, token: str) -> int:
        return self.vocab.index(token)

    def ids(self, text: str) -> list[int]:
        """One token per character."""
        return [self.id(char) for char in text]

    def spec(
        self,
        kind: RequestKind,
        source: str | dict[str, Any] | list[Any] | None,
        options: CompileOptions = DEFAULT,
    ) -> GrammarSpec:
        return GrammarSpec.build(kind, source, options)

    def matcher(
        self, spec: GrammarSpec, *, stop_token_ids: Iterable[int] | None = None
    ) -> XGrammarMatcher:
        compiled = self.engine.compile(spec)
        stops = None if stop_token_ids is None else list(stop_token_ids)
        return self.engine.new_matcher(compiled, stop_token_ids=stops, max_rollback_tokens=0)

    def accepts_all(self, matcher: XGrammarMatcher, tokens: Sequence[int]) -> bool:
        return all(matcher.accept_token(token) for token in tokens)

    def matches(self, spec: GrammarSpec, text: str) -> bool:
        """Whether ``text`` followed by the stop token is a complete match of ``spec``."""
        matcher = self.matcher(spec)
        if not self.accepts_all(matcher, self.ids(text)):
            return False
        return matcher.accept_token(self.eos) and matcher.is_terminated()


@pytest.fixture(scope="session")
def small() -> SmallTokenizer:
    info = xgr.TokenizerInfo(encoded_vocab=list(VOCAB), stop_token_ids=[VOCAB.index(EOS)])
    return SmallTokenizer(XGrammarEngine(info, compile_threads=1), VOCAB)


class _SmallVocabulary:
    """:data:`VOCAB` as llguidance reads a tokenizer: token bytes and an encoder."""

    def __init__(self) -> None:
        self.eos_token_id = VOCAB.index(EOS)
        self.bos_token_id = None
        self.tokens = [token.encode() for token in VOCAB]
        self.special_token_ids = [VOCAB.index(EOS), VOCAB.index(EOT)]
        self.is_tokenizer_wrapper = True

    def __call__(self, text: str) -> list[int]:
        return [VOCAB.index(char) for char in text]


def small_llguidance_tokenizer() -> llguidance.LLTokenizer:
    return llguidance.LLTokenizer(_SmallVocabulary())


@pytest.fixture(scope="session")
def small_llguidance() -> LLGuidanceEngine:
    return LLGuidanceEngine(small_llguidance_tokenizer())


@pytest.fixture(scope="session")
def model_tokenizer() -> Any:
    """The tiny model's real 129k-token tokenizer: for what only a full vocabulary shows."""
    from harness.model import model_tokenizer

    return model_tokenizer()


@pytest.fixture(scope="session")
def routed(small: SmallTokenizer, small_llguidance: LLGuidanceEngine) -> RoutedEngine:
    """Both small engines, routed per spec as the backend routes them."""
    return RoutedEngine(small.engine, small_llguidance)


def compact_json_spec(schema: Any) -> GrammarSpec:
    """A JSON-schema request for ``schema`` with compact JSON, as the engine core gets it."""
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


def assert_served_and_enforced(routed: RoutedEngine, schema: Any, valid: str, invalid: str) -> None:
    """``schema`` is routed (not refused), and its grammar takes ``valid`` but not ``invalid``."""
    spec = compact_json_spec(schema)
    route(spec)
    assert routed_accepts(routed, spec, valid)
    assert not routed_accepts(routed, spec, invalid)


def routed_accepts(routed: RoutedEngine, spec: GrammarSpec, text: str) -> bool:
    """Whether ``routed``'s grammar for ``spec`` takes ``text``, a token a character, and ends."""
    compiled = routed.compile(spec)
    matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    tokens = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in tokens) and matcher.is_terminated()
