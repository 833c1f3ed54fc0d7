"""The first characters of an anchored pattern, which prove two string branches exclusive.

The property test holds the reader to its one promise against Python's
``re`` (which reads this subset of ECMA-262 alike): every non-empty string a
pattern matches starts with a character of the set read, and a pattern
read as not matching the empty string does not.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammar_guard.core.schema.facts import SchemaFacts
from grammar_guard.core.schema.pattern_starts import Chars, first_chars


def _holds(chars: Chars, char: str) -> bool:
    return not chars.disjoint(Chars(False, ((ord(char), ord(char)),)))


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("^https?://.+$", "^\\./.+$"),  # Github_easy o90249
        ("^(?:[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12})$", "^\\$[A-Z0-9-_]+"),
        ("^[a-c]", "^[^a-z]"),
        ("^\\d", "^(?:x|y)z"),
        ("^(?=a)b|^c", "^a"),  # a lookahead decides nothing: "b" or "c" first
    ],
)
def test_patterns_starting_apart_are_disjoint(left: str, right: str) -> None:
    left_first, right_first = first_chars(left), first_chars(right)
    assert left_first is not None and right_first is not None
    assert left_first.disjoint(right_first)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("^a", "^[^b]"),
        ("^\\w", "^_"),
        ("^.", "^x"),
        ("^\\s", "^ "),  # read as any character
        ("^[\\d-x]", "^-"),  # \d, "-" and "x": not the range "0" to "x"
        ("^a?b", "^b"),
        ("^(?:a|)c", "^c"),
    ],
)
def test_patterns_that_may_share_a_first_character_are_not(left: str, right: str) -> None:
    left_first, right_first = first_chars(left), first_chars(right)
    assert left_first is not None and right_first is not None
    assert not left_first.disjoint(right_first)


@pytest.mark.parametrize(
    "pattern",
    ["abc", "^a|b", "^a*", "^(?:a|b?)", "^$", "^\\b", "^(a", "x^a", "^a)", "(^a)"],
    ids=[
        "unanchored",
        "an-alternative-unanchored",
        "empty-star",
        "empty-alternative",
        "empty-only",
        "zero-width-only",
        "unclosed",
        "anchor-inside",
        "stray-paren",
        "anchor-in-group",
    ],
)
def test_patterns_that_prove_nothing(pattern: str) -> None:
    assert first_chars(pattern) is None


def test_a_hostile_nesting_depth_is_refused_not_recursed() -> None:
    assert first_chars("^" + "(" * 10_000 + "a" + ")" * 10_000) is None


def test_facts_prove_string_branches_exclusive_by_their_patterns() -> None:
    facts = SchemaFacts({})
    url = {"type": "string", "pattern": "^https?://"}
    relative = {"type": "string", "pattern": "^\\./"}
    untyped = {"pattern": "^\\./"}  # numbers pass it and would pass an untyped url too
    assert facts.exclusive(url, relative)
    assert facts.exclusive(url, {"allOf": [untyped, {"type": "string"}]})
    assert not facts.exclusive({"pattern": "^https?://"}, untyped)


# --- the promise, against Python's re ---------------------------------------------------

_ALPHABET = "ab-._0 \n"
_ATOMS = st.sampled_from(
    ["a", "b", "-", "\\.", ".", "[a-b]", "[^a]", "\\d", "\\w", "\\D", "\\W", "[_0]", "\\b"]
)
_QUANTIFIERS = st.sampled_from(["", "", "?", "*", "+", "{0,2}", "{2}", "{1,}"])


@st.composite
def _patterns(draw: st.DrawFn, depth: int = 2) -> str:
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        if depth and draw(st.integers(0, 4)) == 0:
            inner = "|".join(draw(st.lists(_patterns(depth - 1), min_size=1, max_size=3)))
            atom = draw(st.sampled_from(["(?:", "(?:", "(?=", "(?!"])) + inner + ")"
        else:
            atom = draw(_ATOMS)
        terms.append(atom + ("" if atom == "\\b" else draw(_QUANTIFIERS)))
    return "".join(terms)


@st.composite
def _anchored(draw: st.DrawFn) -> str:
    return "|".join("^" + draw(_patterns()) for _ in range(draw(st.integers(1, 2))))


def test_every_string_a_pattern_matches_starts_as_read() -> None:
    seen: Counter[str] = Counter()

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(_anchored(), st.lists(st.text(_ALPHABET, max_size=4), min_size=20, max_size=40))
    def check(pattern: str, strings: list[str]) -> None:
        first = first_chars(pattern)
        seen["read" if first is not None else "proves nothing"] += 1
        if first is None:
            return
        compiled = re.compile(pattern, re.ASCII)
        for string in strings:
            if compiled.search(string):
                seen["matches"] += 1
                assert string, f"{pattern!r} matches the empty string"
                assert _holds(first, string[0]), (pattern, string, first)

    check()
    # Not vacuous: many patterns are read, and they match many strings.
    assert seen["read"] >= 150 and seen["matches"] >= 500, seen


def test_hostile_braces_are_read_in_one_pass() -> None:
    # Each "{" is read where it stands: a text of unclosed ones is not searched
    # to its end once per brace, and bounds past Python's integer digits parse.
    assert first_chars("^x" + "a{" * 200_000 + "}") == Chars(False, ((ord("x"), ord("x")),))
    assert first_chars("^a{" + "9" * 5000 + "}") == Chars(False, ((ord("a"), ord("a")),))
    assert first_chars("^a{" + "0" * 5000 + ",2}") is None  # may be empty
