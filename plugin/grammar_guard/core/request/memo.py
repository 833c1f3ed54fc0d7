"""What the API process decided of recent specs, so a repeated key is not parsed again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

from grammar_guard.core.request.spec import GrammarSpec

# Keys hold the grammar text (up to the 1 MiB input limit each), so one
# bound is on characters.
DEFAULT_MAX_CHARS = 16 << 20
# And one on entries: each holds hundreds of bytes besides its text (the
# key, its place in the order, the value: an error and its traceback, or
# findings), so 16 Mi one-character specs would hold gigabytes. A deployment
# repeats far fewer distinct specs than this (its tools' schemas, say).
DEFAULT_MAX_ENTRIES = 4096

V = TypeVar("V")


class SpecMemo(Generic[V]):
    """A least-recently-used map from specs to what was decided of them."""

    def __init__(
        self, max_chars: int = DEFAULT_MAX_CHARS, max_entries: int = DEFAULT_MAX_ENTRIES
    ) -> None:
        self._max_chars = max_chars
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._values: OrderedDict[GrammarSpec, V] = OrderedDict()
        self._chars = 0

    def get(self, spec: GrammarSpec) -> V | None:
        with self._lock:
            value = self._values.get(spec)
            if value is not None:
                self._values.move_to_end(spec)
            return value

    def remember(self, spec: GrammarSpec, value: V) -> None:
        size = len(spec.text)
        if size > self._max_chars:
            return
        with self._lock:
            if self._values.pop(spec, None) is None:
                self._chars += size
            self._values[spec] = value
            while self._chars > self._max_chars or len(self._values) > self._max_entries:
                forgotten, _ = self._values.popitem(last=False)
                self._chars -= len(forgotten.text)
