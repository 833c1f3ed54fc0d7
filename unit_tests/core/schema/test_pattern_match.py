"""The ECMA-262 pattern matcher the rewrites decide named values with.

Checked against the equivalence tests' oracle (Python's ``re`` with
ECMA-262's ``$`` and ``\\s``, ASCII ``\\d`` and ``\\w``) on random strings,
for patterns of the subset it reads; what it does not read it leaves
undecided, never guessed.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unit_tests.core.schema.test_schema_rewrite_equivalence import PROPERTIES, _ecma

from grammar_guard.core.schema.pattern_match import pattern_matches

READ = [
    "a*", "^a*$", "aaa*", "^a{2,3}$", "^(ab|cd)+$", "^\\d{3}-\\d{2}$", "^.*$", "^[^a-c]+$",
    "b$", "^$", "a|", "^(?:x|y)?z{0,2}$", "[\\w.-]+@[\\w-]+", "^\\s*\\S+\\s*$", "^\\x41\\u0042$",
    "^[\\]\\-a]+$", "}{", "^(a|ab)(c|bcd)(d*)$", "^[0-9]{2,}$", "((a)|b)*?c",
]  # fmt: skip
UNREAD = [
    "(?=a)", "(?!a)", "(?<=a)b", "(?<n>a)", "(a)\\1", "\\bword\\b", "\\p{L}", "\\cJ", "\\a",
    "[]", "[^]", "[\\d-z]", "[z-a]", "a{3,1}", "*a", "a**", "(a", "a)", "\U0001f600",
]  # fmt: skip


@pytest.mark.parametrize("pattern", READ)
def test_a_pattern_read_decides_as_ecma_262_does(pattern: str) -> None:
    oracle = re.compile(_ecma(pattern).pattern, re.ASCII)

    @settings(PROPERTIES, max_examples=300)
    # Not U+2028: Python's "." matches it, ECMA-262's does not (below).
    @given(st.text(alphabet="abcdxyz-@._019 \n\t\u00a0AB{},", max_size=12))
    def check(text: str) -> None:
        assert pattern_matches(pattern, text) == bool(oracle.search(text)), text

    check()


@pytest.mark.parametrize("pattern", UNREAD)
def test_what_is_not_read_is_left_undecided(pattern: str) -> None:
    assert pattern_matches(pattern, "a") is None


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^.$", "\u2028", False),  # a line terminator, as "\n" is
        ("^\\s$", "\u2028", True),
        ("x{,3}", "x{,3}", True),  # no bound: ECMA-262 reads the braces as themselves
        ("x{,3}", "xx", False),
        ("^\\w$", "\u00e9", False),  # ASCII word characters only
        ("^\\d$", "\u0663", False),
    ],
)
def test_where_python_reads_otherwise_ecma_262_decides(
    pattern: str, text: str, matches: bool
) -> None:
    assert pattern_matches(pattern, text) is matches


def test_a_string_past_the_basic_plane_is_left_undecided() -> None:
    # ECMA-262 without the u flag reads it as two UTF-16 units, "." as one of them.
    assert pattern_matches("^.$", "\U0001f600") is None


def test_nested_repetitions_cost_no_backtracking() -> None:
    # Exponential for a backtracking engine: here each character moves a set of states.
    assert pattern_matches("^(a*)*b$", "a" * 2000) is False
    assert pattern_matches("^(a|a)*$", "a" * 2000) is True


def test_work_past_the_bound_is_left_undecided() -> None:
    assert pattern_matches("^a{1000}$", "a" * 1000) is None
