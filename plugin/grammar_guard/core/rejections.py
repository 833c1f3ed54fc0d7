"""Remembered invalid grammars, so a client repeating a bad one is refused without re-parsing."""

from __future__ import annotations

import threading
from collections import OrderedDict

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.spec import GrammarSpec

# Keys hold the grammar text (up to the 1 MiB input limit each), so the
# bound is on characters, not entries.
DEFAULT_MAX_CHARS = 16 << 20


class Rejections:
    """A least-recently-used set of specs known to be invalid, with their errors."""

    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._max_chars = max_chars
        self._lock = threading.Lock()
        self._errors: OrderedDict[GrammarSpec, InvalidGrammarError] = OrderedDict()
        self._chars = 0

    def get(self, spec: GrammarSpec) -> InvalidGrammarError | None:
        with self._lock:
            error = self._errors.get(spec)
            if error is not None:
                self._errors.move_to_end(spec)
            return error

    def remember(self, spec: GrammarSpec, error: InvalidGrammarError) -> None:
        size = len(spec.text)
        if size > self._max_chars:
            return
        with self._lock:
            if spec in self._errors:
                return
            self._errors[spec] = error
            self._chars += size
            while self._chars > self._max_chars:
                forgotten, _ = self._errors.popitem(last=False)
                self._chars -= len(forgotten.text)
