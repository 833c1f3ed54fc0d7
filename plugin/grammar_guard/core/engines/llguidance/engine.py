"""The llguidance implementation of :mod:`grammar_guard.core.engines.base`: the library binding.

What llguidance is given for a request is decided in
:mod:`grammar_guard.core.engines.llguidance.rewrite`; this module compiles,
serialises and matches. llguidance builds its lexer lazily, so a "compile"
is cheap (milliseconds where xgrammar may take seconds); what is cached is
a matcher at the start of the grammar, which each request deep-copies.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from copy import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import numpy as np

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.fingerprint import engine_fingerprint
from grammar_guard.core.engines.llguidance import rewrite as llguidance_rewrite
from grammar_guard.core.engines.llguidance.matcher import (
    NO_TOKEN_FITS,
    LLGuidanceCompiled,
    LLGuidanceMatcher,
    compute_row,
    summary,
)
from grammar_guard.core.engines.llguidance.rewrite import GRAMMAR_REWRITES, validated
from grammar_guard.core.engines.refusals import compile_failure, require_a_first_token
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.schema.rewrite import REWRITE_VERSION
from grammar_guard.core.settings import UnenforcedPolicy

if TYPE_CHECKING:
    from grammar_guard.core.request.spec import GrammarSpec

# llguidance logs grammar warnings itself at level 1; the reasons reach the
# client through our errors instead.
_SILENT = 0


@dataclass(frozen=True)
class LLGuidanceRecipe:
    """An :class:`LLGuidanceEngine` as picklable data, for compile processes."""

    tokenizer_json: str
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE

    def build(self) -> LLGuidanceEngine:
        # The tokenizer (tens of MiB for a 129k vocabulary) is built on first
        # use; RoutedRecipe builds it at once unless routing can never use it.
        return LLGuidanceEngine(recipe=self, unenforced=self.unenforced)

    def tokenizer(self) -> llguidance.LLTokenizer:
        return llguidance.LLTokenizer(
            self.tokenizer_json, n_vocab=self.vocab_size, eos_token=list(self.eos_token_ids)
        )


class LLGuidanceEngine:
    """Built from a tokenizer object (tests, special vocabularies) or from a recipe."""

    def __init__(
        self,
        tokenizer: llguidance.LLTokenizer | None = None,
        *,
        recipe: LLGuidanceRecipe | None = None,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> None:
        if tokenizer is None and recipe is None:
            raise TypeError("an llguidance engine needs a tokenizer or a recipe")
        self._given_tokenizer = tokenizer
        self._recipe = recipe
        self._unenforced = unenforced

    @functools.cached_property
    def _tokenizer(self) -> llguidance.LLTokenizer:
        if self._given_tokenizer is not None:
            return self._given_tokenizer
        assert self._recipe is not None
        return self._recipe.tokenizer()

    @classmethod
    def for_hf_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int,
        *,
        stop_token_ids: Sequence[int],
        special_token_ids: Collection[int] = (),
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> LLGuidanceEngine:
        """For a fast Hugging Face tokenizer, the only kind llguidance reads.

        ``stop_token_ids`` end a grammar's output when a request names none of
        its own; given, not read from the tokenizer, so that both engines stop
        on the same tokens (a bare tokenizer file often names no EOS at all).
        ``special_token_ids`` are the tokens the other engine keeps out of
        grammar text; llguidance keeps out those its tokenizer reads as
        special, and refuses to serve (ValueError) if that leaves one in.
        """
        backend = copy(tokenizer.backend_tokenizer)  # a copy: padding settings are shared
        backend.no_padding()
        backend.no_truncation()
        recipe = LLGuidanceRecipe(
            backend.to_str(),
            max(vocab_size, len(tokenizer)),
            tuple(int(token) for token in stop_token_ids),
            unenforced,
        )
        engine = recipe.build()
        # Built now, in the process that serves: a tokenizer llguidance cannot
        # read fails the start-up, not the first request routed to it.
        engine.load_tokenizer()
        as_text = sorted(t for t in special_token_ids if not engine._tokenizer.is_special_token(t))
        if as_text:
            raise ValueError(
                f"llguidance reads {len(as_text)} of this tokenizer's special tokens as "
                f"text (ids {as_text[:5]}), so its grammars could produce them"
            )
        return engine

    def load_tokenizer(self) -> None:
        _ = self._tokenizer

    @property
    def vocab_size(self) -> int:
        if self._recipe is not None:
            return self._recipe.vocab_size
        return int(self._tokenizer.vocab_size)

    @functools.cached_property
    def fingerprint(self) -> str:
        return engine_fingerprint(
            EngineName.LLGUIDANCE,
            self._identity,
            self._unenforced,
            GRAMMAR_REWRITES,
            REWRITE_VERSION,
        )

    @functools.cached_property
    def _identity(self) -> str:
        if self._recipe is not None:
            return f"{self._recipe.tokenizer_json}\n{self._recipe.vocab_size}"
        # A tokenizer built in place (tests, raw vocabularies): its tokens are its identity.
        tokens = [self._tokenizer.decode_bytes([t]) for t in range(self.vocab_size)]
        return json.dumps([token.hex() for token in tokens])

    def recipe(self) -> LLGuidanceRecipe:
        if self._recipe is None:
            raise TypeError("this llguidance engine was built from a tokenizer object")
        return self._recipe

    def serialize(self, compiled: LLGuidanceCompiled) -> bytes:  # type: ignore[override]
        return compiled.grammar.encode()

    def deserialize(self, data: bytes) -> LLGuidanceCompiled:
        try:
            grammar = data.decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"not an llguidance grammar: {exc}") from exc
        try:
            return self._start(grammar, "stored grammar")
        except InvalidGrammarError as exc:
            raise ValueError(f"not a grammar for this engine: {exc.reason}") from exc

    check = staticmethod(llguidance_rewrite.check)

    def compile(self, spec: GrammarSpec) -> LLGuidanceCompiled:
        grammar, _ = validated(spec, self._unenforced)
        compiled = self._start(grammar, spec.kind.value)
        require_a_first_token(spec, self._allows_a_first_token(compiled))
        return compiled

    def new_matcher(
        self,
        compiled: LLGuidanceCompiled,  # type: ignore[override]
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,  # llguidance keeps its whole history
    ) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(
            compiled.start.deep_copy(),
            stop_ids=frozenset(stop_token_ids or ()),
            eos_ids=frozenset(self._tokenizer.eos_tokens),
        )

    def _start(self, grammar: str, what: str) -> LLGuidanceCompiled:
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=_SILENT)
        if matcher.is_error():
            raise compile_failure(what, matcher.get_error())
        return LLGuidanceCompiled(grammar, matcher)

    def _allows_a_first_token(self, compiled: LLGuidanceCompiled) -> bool:
        matcher = compiled.start.deep_copy()
        if matcher.is_stopped():
            return True
        words = np.zeros((1, (self.vocab_size + 31) // 32), dtype=np.uint32)
        compute_row(matcher, words, 0)
        if matcher.is_error() and NO_TOKEN_FITS not in (error := matcher.get_error()):
            # Past a limit already at its first mask: say which, not "unsatisfiable".
            raise InvalidGrammarError(f"the grammar is past llguidance's limits: {summary(error)}")
        return bool(words.any()) and not matcher.is_error()
