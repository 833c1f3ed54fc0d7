"""The pattern scan reads a hostile pattern in time linear in its length.

A pattern is client text up to the 1 MiB input limit, read on the API
server's validation path. The anchor check used to compare every item of a
sequence with all those before and after it: 100,000 escaped quotes took
half a minute. Counted in reads of the items' kinds, not timed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from grammar_guard.core.schema import regex_scan
from grammar_guard.core.schema.capabilities import PatternSupport


@dataclass
class _CountedNode:
    """A parsed item that counts how often its kind is read."""

    reads: list[int]
    _kind: str
    quantified: bool = False
    alternatives: list[list[_CountedNode]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        self.reads[0] += 1
        return self._kind


def _anchor_reads(kinds: list[str]) -> int:
    reads = [0]
    items = [_CountedNode(reads, kind) for kind in kinds]
    regex_scan._anchor_problems([items], True, True)  # type: ignore[arg-type]
    return reads[0]


SEQUENCES = {
    "atoms": lambda n: ["atom"] * n,
    "leading anchors": lambda n: ["start"] * n + ["atom"],
    "trailing anchors": lambda n: ["atom"] + ["end"] * n,
    "anchors around atoms": lambda n: ["start"] + ["atom"] * n + ["end"],
}


@pytest.mark.parametrize("shape", SEQUENCES)
def test_the_anchor_check_reads_each_item_a_bounded_number_of_times(shape: str) -> None:
    n = 5_000
    assert _anchor_reads(SEQUENCES[shape](n)) <= 8 * (n + 2)


def test_a_pattern_of_escaped_quotes_at_the_size_limit_is_judged() -> None:
    pattern = '\\"' * (1 << 19)  # 1 MiB of text
    problems = regex_scan.pattern_problems(pattern, PatternSupport())
    assert any("double quote" in problem for problem in problems)


@pytest.mark.parametrize(
    "opening",
    ["a{", "(?<", "\\u{"],
    ids=["quantifier-braces", "group-names", "code-point-braces"],
)
def test_openings_closed_only_at_the_end_are_read_once(opening: str) -> None:
    # Each opening was searched for its closing to the text's end, found it
    # there, judged it no quantifier, name or code point, and moved on by a
    # character: a quadratic read (a minute at the size limit). Now each is
    # matched where it stands.
    pattern = opening * ((1 << 20) // len(opening) - 1) + "}>"
    problems = regex_scan.pattern_problems(pattern, PatternSupport())
    assert isinstance(problems, list)
