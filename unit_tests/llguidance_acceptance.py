"""Whether llguidance, as grammar-guard runs it, accepts a text: one token per byte.

A vocabulary of bytes spells every string, non-ASCII included, which the
small test vocabulary of conftest cannot.
"""

from __future__ import annotations

import functools

import llguidance

from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.llguidance.matcher import LLGuidanceCompiled

BYTE_EOS = b"</s>"


class ByteVocabulary:
    """One token per byte, and EOS, as llguidance reads a tokenizer (conftest's shape)."""

    def __init__(self) -> None:
        self.tokens = [bytes([byte]) for byte in range(256)] + [BYTE_EOS]
        self.eos_token_id = 256
        self.bos_token_id = None
        self.special_token_ids = [self.eos_token_id]
        self.is_tokenizer_wrapper = True

    def __call__(self, text: str) -> list[int]:
        return list(text.encode())


@functools.cache
def byte_llguidance() -> LLGuidanceEngine:
    return LLGuidanceEngine(llguidance.LLTokenizer(ByteVocabulary()))


def llguidance_accepts(compiled: LLGuidanceCompiled, text: str) -> bool:
    """Whether ``text``, then the stop token, is a complete match of ``compiled``."""
    engine = byte_llguidance()
    matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    if not all(matcher.accept_token(byte) for byte in text.encode()):
        return False
    return matcher.accept_token(ByteVocabulary().eos_token_id) and matcher.is_terminated()
