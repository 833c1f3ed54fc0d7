"""Which engine's masks cost less for one key, measured on a path a request of the key took.

No rule read off a schema says this: inside long bounded strings xgrammar's
masks cost 3 to 14 times llguidance's on some collection schemas and half
on others (docs/routing.md). So the first requests of a key that could move
engines record the tokens they accept (:class:`PathRecorder`, a matcher
wrapper), and before the key moves, both grammars are replayed along that
path, a mask fill before each token as in decoding (:func:`fill_seconds`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from grammar_guard.core.engines.base import MatcherWrapper
from grammar_guard.core.masks.fill import fill_by_engine
from grammar_guard.core.masks.layout import allocate_bitmask

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engines.base import CompiledGrammar, GrammarEngine, TokenMatcher

# A path this long shows what a key's masks cost; a key whose requests are
# shorter gains little from cheaper masks anyway.
MIN_PATH_TOKENS = 8
MAX_PATH_TOKENS = 256


class RecordedPath:
    """The tokens one request of a key accepted so far, rollbacks undone."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.finished = False  # the grammar terminated: the path is whole

    @property
    def ready(self) -> bool:
        return len(self.tokens) >= MIN_PATH_TOKENS or (self.finished and bool(self.tokens))

    def snapshot(self) -> RecordedPath:
        """A copy no recorder writes to: its request may still be decoding."""
        copy = RecordedPath()
        copy.tokens = list(self.tokens)
        copy.finished = self.finished
        return copy


class PathRecorder(MatcherWrapper):
    """A matcher that writes the tokens it accepts into a :class:`RecordedPath`."""

    def __init__(self, inner: TokenMatcher, path: RecordedPath) -> None:
        self.inner = inner
        self._path = path
        # Accepted and not rolled back, counting those past MAX_PATH_TOKENS.
        self._depth = 0

    @property
    def engine_name(self) -> str:
        return self.inner.engine_name

    def accept_token(self, token_id: int) -> bool:
        accepted = self.inner.accept_token(token_id)
        if accepted:
            if self.inner.is_terminated():
                # The stop token is the request's own choice: not part of the path.
                self._path.finished = True
            elif self._depth == len(self._path.tokens) < MAX_PATH_TOKENS:
                self._path.tokens.append(token_id)
            self._depth += 1
        return accepted

    def rollback(self, num_tokens: int) -> None:
        self.inner.rollback(num_tokens)
        self._depth -= num_tokens
        del self._path.tokens[max(0, self._depth) :]
        self._path.finished = False

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self.inner.fill_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def reset(self) -> None:
        self.inner.reset()
        self._depth = 0
        self._path.tokens.clear()
        self._path.finished = False

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        fill_by_engine(matchers, bitmask, rows, threads=threads)  # it fills their inner matchers


def fill_seconds(
    engine: GrammarEngine, compiled: CompiledGrammar, path: Sequence[int]
) -> float | None:
    """Seconds to fill a mask before each token of ``path`` and accept it; None if refused."""
    matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    bitmask = allocate_bitmask(1, engine.vocab_size)
    started = time.perf_counter()
    for token in path:
        matcher.fill_bitmask(bitmask, 0)
        if not matcher.accept_token(token):
            return None
    return time.perf_counter() - started
