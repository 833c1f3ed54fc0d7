"""What the engines share: batch fills grouped by engine name, and engines loaded apart."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pytest
import torch

from grammar_guard.core.engines.base import MatcherWrapper
from grammar_guard.core.masks.fill import fill_by_engine


class NamedMatcher:
    """Records the batch calls it is the first matcher of."""

    def __init__(self, engine_name: str, calls: list[tuple[list[NamedMatcher], list[int]]]) -> None:
        self.engine_name = engine_name
        self._calls = calls

    def fill_batch(
        self, matchers: Sequence[NamedMatcher], bitmask: torch.Tensor, rows: Sequence[int], **_: int
    ) -> None:
        self._calls.append((list(matchers), list(rows)))


class Wrapper(MatcherWrapper):
    def __init__(self, inner: NamedMatcher | Wrapper) -> None:
        self.inner = inner  # type: ignore[assignment]


def test_a_batch_is_one_call_per_engine_name_with_wrapped_matchers_unwrapped() -> None:
    calls: list[tuple[list[NamedMatcher], list[int]]] = []
    first, wrapped, other, last = (NamedMatcher(name, calls) for name in ("a", "a", "b", "a"))
    matchers = [first, Wrapper(wrapped), other, Wrapper(Wrapper(last))]

    fill_by_engine(matchers, torch.zeros(4, 1, dtype=torch.int32), [0, 1, 2, 3], threads=1)  # type: ignore[arg-type]

    assert calls == [([first, wrapped, last], [0, 1, 3]), ([other], [2])]


@pytest.mark.parametrize(
    ("module", "other_library"),
    [
        ("grammar_guard.core.engines.xgrammar.engine", "llguidance"),
        ("grammar_guard.core.engines.llguidance.engine", "xgrammar"),
    ],
)
def test_loading_one_engine_does_not_load_the_other_library(
    module: str, other_library: str
) -> None:
    code = f"import sys, {module}; print({other_library!r} in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "False"
