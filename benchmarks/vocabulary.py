"""The tokens on which grammar-guard's masks differ from vLLM's.

grammar-guard on xgrammar fills the same masks as vLLM's xgrammar backend
except inside length-bounded strings, where xgrammar 0.2.8 also allows two
kinds of token that grammar-guard keeps out on purpose (docs/usage.md,
docs/reliability.md): added tokens (DeepSeek's special and placeholder
tokens) and tokens holding a raw control character, which JSON forbids in a
string. The set is drawn from the vocabulary alone, not from grammar-guard's
code, so a benchmark checking masks against it checks the plugin, not itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BITS_PER_WORD = 32


def kept_out_of_strings(tokenizer: Any, vocab_size: int) -> frozenset[int]:
    """Token ids vLLM's xgrammar may allow in a bounded string and grammar-guard does not."""
    import xgrammar

    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    control = {
        token_id
        for token_id, text in enumerate(info.decoded_vocab)
        if any(byte < 0x20 for byte in bytes(text))
    }
    return frozenset(control | {int(token_id) for token_id in tokenizer.added_tokens_decoder})


def as_bitmask_row(token_ids: frozenset[int], words: int) -> np.ndarray:
    """``token_ids`` as one int32 bitmask row of ``words`` words, the layout both engines fill."""
    bits = np.zeros(words * BITS_PER_WORD, dtype=np.uint8)
    bits[[token_id for token_id in token_ids if token_id < bits.size]] = 1
    return np.packbits(bits, bitorder="little").view(np.int32)
