"""SpecMemo: what was decided of recent specs, bounded by their characters and their count."""

from __future__ import annotations

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.memo import DEFAULT_MAX_CHARS, DEFAULT_MAX_ENTRIES, SpecMemo
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind


def _spec(pattern: str) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.REGEX, pattern, CompileOptions())


def test_remembers_the_error_of_a_spec() -> None:
    rejections = SpecMemo[InvalidGrammarError]()
    error = InvalidGrammarError("unbalanced parenthesis")
    rejections.remember(_spec("(a"), error)
    assert rejections.get(_spec("(a")) is error
    assert rejections.get(_spec("(b")) is None


def test_forgets_least_recently_used_beyond_its_character_bound() -> None:
    rejections = SpecMemo[InvalidGrammarError](max_chars=10)
    for pattern in ("(aaa", "(bbb"):
        rejections.remember(_spec(pattern), InvalidGrammarError(pattern))
    assert rejections.get(_spec("(aaa")) is not None  # now the most recently used
    rejections.remember(_spec("(ccc"), InvalidGrammarError("c"))
    assert rejections.get(_spec("(bbb")) is None
    assert rejections.get(_spec("(aaa")) is not None and rejections.get(_spec("(ccc")) is not None


def test_a_spec_larger_than_the_bound_is_not_kept() -> None:
    rejections = SpecMemo[InvalidGrammarError](max_chars=3)
    rejections.remember(_spec("(abcd"), InvalidGrammarError("too big to keep"))
    assert rejections.get(_spec("(abcd")) is None


def test_a_second_value_replaces_the_first_and_its_text_is_counted_once() -> None:
    memo = SpecMemo[str](max_chars=8)
    memo.remember(_spec("(aaa"), "first")
    memo.remember(_spec("(aaa"), "second")
    memo.remember(_spec("(bbb"), "b")  # 4 + 4 characters: both fit
    assert memo.get(_spec("(aaa")) == "second"
    assert memo.get(_spec("(bbb")) == "b"


def test_forgets_least_recently_used_beyond_its_entry_bound() -> None:
    memo = SpecMemo[str](max_chars=1000, max_entries=2)
    for pattern in ("a", "b"):
        memo.remember(_spec(pattern), pattern)
    assert memo.get(_spec("a")) == "a"  # now the most recently used
    memo.remember(_spec("c"), "c")
    assert memo.get(_spec("b")) is None
    assert memo.get(_spec("a")) == "a" and memo.get(_spec("c")) == "c"


def test_many_short_specs_are_bounded_by_count_not_only_by_characters() -> None:
    memo = SpecMemo[str]()
    specs = [_spec(f"a{index}") for index in range(DEFAULT_MAX_ENTRIES + 100)]
    for spec in specs:
        memo.remember(spec, "kept")
    assert sum(len(spec.text) for spec in specs) < DEFAULT_MAX_CHARS  # the count is what binds
    assert sum(memo.get(spec) is not None for spec in specs) == DEFAULT_MAX_ENTRIES
    assert memo.get(specs[0]) is None and memo.get(specs[-1]) == "kept"
