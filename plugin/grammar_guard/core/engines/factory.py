"""The grammar engine for a host's tokenizer, as ``GRAMMAR_GUARD_ENGINE`` selects it.

Every host builds its engine here: the engine a server serves with and the
one the command line checks grammars with must be the same, down to the
fingerprint that names their cache files.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from grammar_guard.core.engines.base import GrammarEngine
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.settings import EngineSelection, SettingsError, UnenforcedPolicy

logger = logging.getLogger(__name__)


def _compile_threads() -> int:
    # xgrammar's own parallelism inside one compile, not the number of compiles.
    return max(1, os.cpu_count() or 1)


def build_engine(
    tokenizer: Any,
    vocab_size: int,
    *,
    mistral: bool = False,
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    selection: EngineSelection = EngineSelection.AUTO,
) -> GrammarEngine:
    """The grammar engine for ``tokenizer``, whose vocabulary the host sizes at ``vocab_size``.

    ``tokenizer`` is a Hugging Face tokenizer or, with ``mistral``, a Mistral
    one (its ``vocab``, ``is_tekken``, ``eos_token_id`` and ``all_special_ids``
    are read). Only the host can tell the two apart, since the test is of its
    own tokenizer type. ``unenforced`` is GRAMMAR_GUARD_UNENFORCED,
    ``selection`` GRAMMAR_GUARD_ENGINE.
    """
    if mistral:
        if selection is not EngineSelection.XGRAMMAR:
            logger.info("grammar-guard: Mistral tokenizer, so every request goes to xgrammar")
        return _mistral_engine(tokenizer, unenforced)
    xgrammar = XGrammarEngine.for_hf_tokenizer(
        tokenizer, vocab_size, compile_threads=_compile_threads(), unenforced=unenforced
    )
    if selection is EngineSelection.XGRAMMAR:
        return xgrammar
    try:
        llguidance = LLGuidanceEngine.for_hf_tokenizer(
            tokenizer,
            vocab_size,
            stop_token_ids=xgrammar.stop_token_ids,
            special_token_ids=xgrammar.special_token_ids,
            unenforced=unenforced,
        )
        if selection is EngineSelection.LLGUIDANCE:
            return llguidance
        return RoutedEngine(xgrammar, llguidance, selection, unenforced)
    except (AttributeError, TypeError, ValueError) as exc:  # not a fast tokenizer, a
        # vocabulary llguidance sizes differently from the host's bitmask, or
        # special tokens it would read as text
        if selection is EngineSelection.LLGUIDANCE:
            raise SettingsError(
                f"GRAMMAR_GUARD_ENGINE=llguidance cannot serve this model: {exc}"
            ) from exc
        logger.warning(
            "grammar-guard: llguidance cannot serve this model (%s); "
            "every request goes to xgrammar",
            exc,
        )
        return xgrammar


def _mistral_engine(tokenizer: Any, unenforced: UnenforcedPolicy) -> XGrammarEngine:
    # Mistral tokenizers are not Hugging Face ones; xgrammar needs the raw
    # vocabulary and whether it is byte-fallback (SentencePiece) or raw (Tekken).
    return XGrammarEngine.for_raw_vocab(
        tokenizer.vocab,
        byte_fallback=not tokenizer.is_tekken,
        stop_token_ids=[tokenizer.eos_token_id],
        add_prefix_space=True,
        compile_threads=_compile_threads(),
        unenforced=unenforced,
        # Its control tokens ([INST], [TOOL_CALLS]...) are in the vocabulary as text.
        special_token_ids=getattr(tokenizer, "all_special_ids", ()),
    )
