"""llguidance's compiled grammar and per-request matcher, and how they write the shared bitmask."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import llguidance
import numpy as np

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.errors import InvalidGrammarError

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import TokenMatcher

# llguidance does not report a grammar's memory; this estimate (a base and a
# share per character of grammar) errs high against what a compiled grammar
# with a started matcher held on the 129k-token vocabulary, so the cache bound
# holds. The lexer states built while decoding are bounded by llguidance's own
# limits.
_BASE_BYTES = 32 * 1024
_BYTES_PER_GRAMMAR_CHAR = 16


@dataclass(frozen=True)
class LLGuidanceCompiled:
    grammar: str
    # A matcher at the start of the grammar; requests get deep copies.
    start: llguidance.LLMatcher

    @property
    def memory_bytes(self) -> int:
        return _BASE_BYTES + len(self.grammar) * _BYTES_PER_GRAMMAR_CHAR

    @property
    def engine_name(self) -> EngineName:
        return EngineName.LLGUIDANCE


class LLGuidanceMatcher:
    """One request's matcher, ending the way vLLM expects a grammar to end.

    The stop token is never fed to llguidance: it is the matcher's own
    decision, so that (as with xgrammar) the grammar is terminated only once
    a stop token was accepted, not as soon as llguidance sees its grammar
    complete, and so that a request's own stop tokens (vLLM passes them per
    request; llguidance knows only its tokenizer's) work alike.
    """

    __slots__ = ("_cleared", "_ended", "_ends", "_eos_ids", "_matcher")

    engine_name = EngineName.LLGUIDANCE

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        *,
        stop_ids: frozenset[int],
        eos_ids: frozenset[int],
    ) -> None:
        self._matcher = matcher
        # The tokens that end this request's output.
        self._ends = stop_ids or eos_ids
        self._eos_ids = eos_ids
        # The tokenizer's stop tokens this request does not stop on: never allowed.
        self._cleared = tuple(eos_ids - self._ends)
        self._ended = False

    def accept_token(self, token_id: int) -> bool:
        if self._ended:
            return False
        if token_id in self._ends:
            if not self._may_end():
                return False
            self._ended = True
            return True
        if token_id in self._eos_ids:
            return False  # the request replaced the tokenizer's stop tokens
        # try_consume, not consume: a refused token leaves the matcher where
        # it was, as xgrammar's does (vLLM checks draft tokens this way), where
        # consume would put it in an error state for good.
        if self._matcher.try_consume_tokens([token_id]) == 1:
            return True
        if self._matcher.is_error():
            # The token was allowed, but taking it went past one of llguidance's
            # limits (a parser row of more items than it keeps, say): not a
            # sampling fault but the grammar's size, so the request ends with it.
            raise self._past_limits()
        return False

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        if self._ended:
            self._ended = False
            num_tokens -= 1
        if num_tokens and not self._matcher.rollback(num_tokens):
            raise RuntimeError(f"llguidance could not roll back: {self._matcher.get_error()}")

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        words = words_of(bitmask)
        compute_row(self._matcher, words, row)
        if self._matcher.is_error():
            # Past one of llguidance's limits (its lexer's size, say), it allows
            # only the stop token, which it then refuses: a dead end the
            # grammar's size caused, so the request ends with the reason.
            raise self._past_limits()
        if self._ends != self._eos_ids:
            self._fix_stop_bits(words, row)

    def is_terminated(self) -> bool:
        return self._ended

    def _past_limits(self) -> InvalidGrammarError:
        return InvalidGrammarError(
            f"the grammar grew past llguidance's limits while decoding: {summary(self.error)}"
        )

    def reset(self) -> None:
        self._ended = False
        self._matcher.reset()

    @property
    def error(self) -> str:
        return str(self._matcher.get_error())

    def _may_end(self) -> bool:
        matcher = self._matcher
        return not matcher.is_error() and bool(matcher.is_accepting() or matcher.is_stopped())

    def _fix_stop_bits(self, words: np.ndarray, row: int) -> None:
        """Allow this request's own stop tokens where the grammar may end, and no other.

        llguidance allows its own EOS exactly where the grammar may end, so
        only a request with other stop tokens needs its row changed. Through
        a NumPy view: a bit set through torch indexing cost several
        microseconds, and vLLM gives every request its own stop tokens.
        """
        may_end = self._may_end()
        for token_id in self._cleared:
            _set_bit(words, row, token_id, False)
        for token_id in self._ends:
            _set_bit(words, row, token_id, may_end)

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        own = cast("Sequence[LLGuidanceMatcher]", matchers)
        words = words_of(bitmask)
        pairs = [(m._matcher, row) for m, row in zip(own, rows, strict=True)]
        if any(not 0 <= row < words.shape[0] for _, row in pairs):
            raise IndexError(f"a row of {rows} is outside the bitmask's {words.shape[0]}")
        _executor(threads).unsafe_compute_mask_ptr(
            pairs, words.ctypes.data, words.shape[1] * words.itemsize, words.shape[0]
        )
        if any(matcher._matcher.is_error() for matcher in own):
            # Past a limit in the batch: its row would allow only a stop token
            # the matcher then refuses. The caller fills each row again on its
            # own, where the failing matcher says why (fill_bitmask).
            raise InvalidGrammarError("a grammar of the batch grew past llguidance's limits")
        fixed = [(m, row) for m, row in zip(own, rows, strict=True) if m._ends != m._eos_ids]
        if fixed:
            for matcher, row in fixed:
                matcher._fix_stop_bits(words, row)


# llguidance's error text is one line of cause, then a dump of the matcher's
# state and the whole grammar: the client gets the cause.
_ERROR_SUMMARY_CHARS = 200


# llguidance's error for a grammar no token can start: unsatisfiable, not too large.
NO_TOKEN_FITS = "NoExtensionBias"


def summary(error: str) -> str:
    return error.split("\n", 1)[0][:_ERROR_SUMMARY_CHARS]


def words_of(bitmask: torch.Tensor) -> np.ndarray:
    """The bitmask's words as unsigned integers, sharing its memory (a CPU tensor).

    llguidance writes masks through a raw pointer, so the shape is checked
    here: 32-bit words, two dimensions, rows back to back.
    """
    words = bitmask.numpy()
    if words.dtype != np.int32 or words.ndim != 2 or not words.flags.c_contiguous:
        raise ValueError(f"a bitmask must be a contiguous 2-D int32 tensor, not {bitmask!r:.80}")
    return words.view(np.uint32)


def compute_row(matcher: llguidance.LLMatcher, words: np.ndarray, row: int) -> None:
    # Through the pointer, as llguidance.torch does: importing that module
    # would build its torch.compile kernel, which imports TorchDynamo and
    # Inductor, a second of CPU in every compile worker's start.
    target = words[row]  # IndexError for a row past the bitmask
    matcher.unsafe_compute_mask_ptr(target.ctypes.data, target.nbytes)


def _set_bit(words: np.ndarray, row: int, token_id: int, allowed: bool) -> None:
    word, bit = divmod(token_id, 32)
    if word >= words.shape[1]:
        return
    if allowed:
        words[row, word] |= np.uint32(1 << bit)
    else:
        words[row, word] &= np.uint32(~(1 << bit) & 0xFFFFFFFF)


@functools.cache
def _executor(threads: int) -> llguidance.LLExecutor:
    return llguidance.LLExecutor(num_threads=threads)
