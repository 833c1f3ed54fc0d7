"""The xgrammar implementation of :mod:`grammar_guard.core.engines.base`: the library binding.

What xgrammar is given for a request is decided in
:mod:`grammar_guard.core.engines.xgrammar.rewrite`, and which special tokens its
text may hold in :mod:`grammar_guard.core.engines.xgrammar.special_tokens`; this
module compiles, serialises and matches.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import xgrammar as xgr

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.fingerprint import engine_fingerprint
from grammar_guard.core.engines.refusals import compile_failure, require_a_first_token
from grammar_guard.core.engines.threads import calling_thread_only
from grammar_guard.core.engines.xgrammar import rewrite as xgrammar_rewrite
from grammar_guard.core.engines.xgrammar.rewrite import (
    GRAMMAR_REWRITES,
    native_reason,
    parse_enforced,
)
from grammar_guard.core.engines.xgrammar.special_tokens import (
    SPECIAL_TOKEN_RULE,
    SpecialTokenVocabularies,
    Vocabulary,
    hf_special_token_ids,
)
from grammar_guard.core.schema.rewrite import REWRITE_VERSION
from grammar_guard.core.settings import UnenforcedPolicy

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import TokenMatcher
    from grammar_guard.core.request.spec import GrammarSpec


@dataclass(frozen=True)
class XGrammarCompiled:
    compiled: xgr.CompiledGrammar
    # The special tokens its grammar names, which the vocabulary it was
    # compiled (and must be loaded) against lets back in.
    named_tokens: frozenset[int] = frozenset()

    @property
    def memory_bytes(self) -> int:
        return int(self.compiled.memory_size_bytes)

    @property
    def engine_name(self) -> EngineName:
        return EngineName.XGRAMMAR


class XGrammarMatcher:
    __slots__ = ("_matcher",)

    engine_name = EngineName.XGRAMMAR

    def __init__(self, matcher: xgr.GrammarMatcher) -> None:
        self._matcher = matcher

    def accept_token(self, token_id: int) -> bool:
        return bool(self._matcher.accept_token(token_id))

    def rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self._matcher.fill_next_token_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        return bool(self._matcher.is_terminated())

    def reset(self) -> None:
        self._matcher.reset()

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        natives = [m._matcher for m in cast("Sequence[XGrammarMatcher]", matchers)]
        _batch_matcher(threads).batch_fill_next_token_bitmask(natives, bitmask, list(rows))


def _allows_a_first_token(compiled: xgr.CompiledGrammar) -> bool:
    """Whether a request under ``compiled`` can emit anything, even just its stop token."""
    matcher = xgr.GrammarMatcher(compiled)
    if matcher.is_terminated():
        return True
    bitmask = xgr.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bool(bitmask.any())


@functools.cache
def _batch_matcher(threads: int) -> xgr.BatchGrammarMatcher:
    # Reused: building one costs more than filling a cheap row.
    return xgr.BatchGrammarMatcher(max_threads=threads)


def _compiler(vocabulary: Vocabulary) -> xgr.GrammarCompiler:
    """The vocabulary's compiler, or a one-thread one (cheap to build) where the caller says so."""
    if calling_thread_only():
        return xgr.GrammarCompiler(vocabulary.info, max_threads=1, cache_enabled=False)
    return vocabulary.compiler


@dataclass(frozen=True)
class XGrammarRecipe:
    """An :class:`XGrammarEngine` as picklable data, for compile processes."""

    tokenizer_json: str
    compile_threads: int
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    special_token_ids: tuple[int, ...] = ()

    def build(self) -> XGrammarEngine:
        info = xgr.TokenizerInfo.deserialize_json(self.tokenizer_json)
        return XGrammarEngine(
            info,
            compile_threads=self.compile_threads,
            unenforced=self.unenforced,
            special_token_ids=self.special_token_ids,
        )


class XGrammarEngine:
    """Grammars over ``tokenizer_info``, with ``special_token_ids`` kept out of grammar text.

    How and why those tokens are kept out, and let back in where a grammar
    names them, is in :mod:`grammar_guard.core.engines.xgrammar.special_tokens`.
    """

    def __init__(
        self,
        tokenizer_info: xgr.TokenizerInfo,
        *,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
        special_token_ids: Collection[int] = (),
    ) -> None:
        self._tokenizer_info = tokenizer_info
        self._compile_threads = compile_threads
        # What compile does with a schema asking for constraints xgrammar
        # would not enforce (GRAMMAR_GUARD_UNENFORCED): refuse it, or compile it.
        self._unenforced = unenforced
        self._vocabularies = SpecialTokenVocabularies(
            tokenizer_info, special_token_ids, compile_threads=compile_threads
        )

    @classmethod
    def for_hf_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int,
        *,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> XGrammarEngine:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        return cls(
            info,
            compile_threads=compile_threads,
            unenforced=unenforced,
            special_token_ids=hf_special_token_ids(tokenizer),
        )

    @classmethod
    def for_raw_vocab(
        cls,
        encoded_vocab: Sequence[str],
        *,
        byte_fallback: bool,
        stop_token_ids: Sequence[int],
        add_prefix_space: bool,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
        special_token_ids: Collection[int] = (),
    ) -> XGrammarEngine:
        """For tokenizers that are not Hugging Face ones (Mistral's, for instance)."""
        info = xgr.TokenizerInfo(
            encoded_vocab=list(encoded_vocab),
            vocab_type=xgr.VocabType.BYTE_FALLBACK if byte_fallback else xgr.VocabType.RAW,
            vocab_size=len(encoded_vocab),
            stop_token_ids=list(stop_token_ids),
            add_prefix_space=add_prefix_space,
        )
        return cls(
            info,
            compile_threads=compile_threads,
            unenforced=unenforced,
            special_token_ids=special_token_ids,
        )

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer_info.vocab_size)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end a grammar's output (xgrammar detects them if not told)."""
        return tuple(int(token) for token in self._tokenizer_info.stop_token_ids)

    @property
    def special_token_ids(self) -> frozenset[int]:
        """The special and control tokens kept out of grammar text."""
        return self._vocabularies.special_ids

    @functools.cached_property
    def fingerprint(self) -> str:
        # Which tokens grammar text leaves out changes every compiled mask.
        special = f"{SPECIAL_TOKEN_RULE}:{sorted(self.special_token_ids)}"
        return engine_fingerprint(
            EngineName.XGRAMMAR,
            self._tokenizer_json,
            self._unenforced,
            GRAMMAR_REWRITES,
            REWRITE_VERSION,
            special,
        )

    @functools.cached_property
    def _tokenizer_json(self) -> str:
        return str(self._tokenizer_info.serialize_json())

    def recipe(self) -> XGrammarRecipe:
        return XGrammarRecipe(
            self._tokenizer_json,
            self._compile_threads,
            self._unenforced,
            tuple(sorted(self.special_token_ids)),
        )

    def serialize(self, compiled: XGrammarCompiled) -> bytes:  # type: ignore[override]
        # The named tokens first: xgrammar loads a grammar into any vocabulary
        # of its size, so the one it was compiled against must be recorded.
        named = " ".join(str(token) for token in sorted(compiled.named_tokens))
        return f"{named}\n{compiled.compiled.serialize_json()}".encode()

    def deserialize(self, data: bytes) -> XGrammarCompiled:
        try:
            named_line, newline, text = data.decode().partition("\n")
            named = frozenset(int(token) for token in named_line.split())
            if not newline or not named <= self.special_token_ids:
                raise ValueError("its first line names no vocabulary of this engine")
            info = self._vocabularies.naming(named).info
            compiled = xgr.CompiledGrammar.deserialize_json(text, info)
        # xgrammar reports every load failure as a RuntimeError subclass;
        # bad text or a bad first line raise ValueError (UnicodeDecodeError is one).
        except (ValueError, RuntimeError) as exc:
            raise ValueError(
                f"not a compiled grammar for this engine: {native_reason(exc)}"
            ) from exc
        return XGrammarCompiled(compiled, named)

    check = staticmethod(xgrammar_rewrite.check)

    def compile(self, spec: GrammarSpec) -> XGrammarCompiled:
        grammar, _ = parse_enforced(spec, self._unenforced)
        named = self._vocabularies.named_tokens(spec, grammar)
        try:
            compiled = _compiler(self._vocabularies.naming(named)).compile_grammar(grammar)
        except Exception as exc:  # native code reports every failure as RuntimeError
            raise compile_failure(spec.kind.value, native_reason(exc)) from exc
        require_a_first_token(spec, _allows_a_first_token(compiled))
        return XGrammarCompiled(compiled, named)

    def new_matcher(
        self,
        compiled: XGrammarCompiled,  # type: ignore[override]
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,
    ) -> XGrammarMatcher:
        return XGrammarMatcher(
            xgr.GrammarMatcher(
                compiled.compiled,
                override_stop_tokens=list(stop_token_ids) if stop_token_ids else None,
                max_rollback_tokens=max_rollback_tokens,
            )
        )
