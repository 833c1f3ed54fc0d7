"""Input that could crash or stall native code is refused before it gets there."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grammar_guard.core.errors import EXCERPT_CHARS, InvalidGrammarError, quoted_excerpt
from grammar_guard.core.request.limits import (
    MAX_GRAMMAR_CHARS,
    MAX_JSON_DEPTH,
    scan_json_depth,
)
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

OPTIONS = CompileOptions()


def build(kind: RequestKind, source: Any) -> GrammarSpec:
    return GrammarSpec.build(kind, source, OPTIONS)


def refusal(kind: RequestKind, source: Any) -> str:
    with pytest.raises(InvalidGrammarError) as info:
        build(kind, source)
    return info.value.reason


def nested_object_text(depth: int) -> str:
    """A JSON schema text whose objects nest exactly ``depth`` levels."""
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def nested_dict(depth: int) -> dict[str, Any]:
    """A dict nested exactly ``depth`` levels, built without recursion."""
    root: dict[str, Any] = {}
    node = root
    for _ in range(depth - 1):
        child: dict[str, Any] = {}
        node["a"] = child
        node = child
    return root


def nested_list(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth - 1):
        child: list[Any] = []
        node.append(child)
        node = child
    node.append("x")
    return root


# --- control characters -----------------------------------------------------------

CONTROL_CHARS = ["\x00", "\x01", "\x08", "\x0b", "\x0c", "\x0e", "\x1b", "\x1f", "\x7f"]


_TEMPLATES = [
    (RequestKind.REGEX, "ab{}c"),
    (RequestKind.GRAMMAR, 'root ::= "ab{}c"'),
    (RequestKind.JSON_SCHEMA, '{{"title": "ab{}c"}}'),
    (RequestKind.CHOICE, '["ab{}c"]'),
]


@pytest.mark.parametrize(
    ("kind", "template", "char"),
    [
        (kind, template, char)
        for kind, template in _TEMPLATES
        for char in CONTROL_CHARS
        # A schema's string may hold DEL raw: test_raw_delete_in_a_schema_is_escaped.
        if (kind, char) != (RequestKind.JSON_SCHEMA, "\x7f")
    ],
)
def test_raw_control_character_is_refused_naming_it(
    kind: RequestKind, template: str, char: str
) -> None:
    source = template.format(char)
    reason = refusal(kind, source)
    assert f"U+{ord(char):04X}" in reason
    assert kind.value in reason
    assert f"offset {source.index(char)}" in reason


def test_raw_delete_in_a_schema_is_escaped() -> None:
    # JSON takes DEL raw in a string; the schema means what its escape means.
    raw, escaped = '{"title": "ab\x7fc"}', '{"title": "ab\\u007fc"}'
    assert build(RequestKind.JSON_SCHEMA, raw) == build(RequestKind.JSON_SCHEMA, escaped)
    assert "\x7f" not in build(RequestKind.JSON_SCHEMA, raw).text


@pytest.mark.parametrize("code_point", [0x00, 0x01, 0x1F, 0x7F])
def test_control_character_as_json_escape_is_refused_outside_a_schema(code_point: int) -> None:
    # The text itself is clean ASCII; the control character only exists once decoded.
    escape = f"\\u{code_point:04x}"
    choices = '["ab' + escape + 'c"]'
    assert all(ord(char) >= 0x20 for char in choices)
    assert f"U+{code_point:04X}" in refusal(RequestKind.CHOICE, choices)


@pytest.mark.parametrize("code_point", [0x00, 0x01, 0x1F, 0x7F])
def test_control_character_as_json_escape_in_a_schema_stays_escaped(code_point: int) -> None:
    # A schema reaches the engines as JSON text only (test_schema_control_characters.py).
    source = '{"type": "string", "const": "ab\\u' + f"{code_point:04x}" + 'c"}'
    text = build(RequestKind.JSON_SCHEMA, source).text
    assert all(0x20 <= ord(char) != 0x7F for char in text)
    assert json.loads(text)["const"] == f"ab{chr(code_point)}c"


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.CHOICE, ["ok", "a\x00b"]),
        (RequestKind.CHOICE, '["ok", "a\\u0000b"]'),
        (
            RequestKind.STRUCTURAL_TAG,
            {"type": "structural_tag", "format": {"type": "const_string", "value": "a\x00"}},
        ),
    ],
)
def test_nul_inside_a_json_value_is_refused(kind: RequestKind, source: Any) -> None:
    assert "U+0000" in refusal(kind, source)


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.REGEX, "a\tb\nc\r\n"),
        (RequestKind.GRAMMAR, 'root ::= "a"\n\t| "b"\r\n'),
        (RequestKind.JSON_SCHEMA, '{\n\t"type": "string",\r\n\t"pattern": "a\\tb\\nc"\n}'),
        (RequestKind.JSON_SCHEMA, {"type": "string", "const": "tab\there\nnewline\r"}),
        (RequestKind.CHOICE, ["line one\nline two", "a\tb"]),
    ],
)
def test_tab_newline_and_carriage_return_are_allowed(kind: RequestKind, source: Any) -> None:
    spec = build(kind, source)
    if kind.text_is_json:
        decoded = source if not isinstance(source, str) else json.loads(source)
        assert json.loads(spec.text) == decoded
    else:
        assert spec.text == source


# --- size -----------------------------------------------------------------------


def test_text_at_the_size_limit_is_allowed() -> None:
    assert len(build(RequestKind.REGEX, "a" * MAX_GRAMMAR_CHARS).text) == MAX_GRAMMAR_CHARS


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.REGEX, "a" * (MAX_GRAMMAR_CHARS + 1)),
        (RequestKind.GRAMMAR, 'root ::= "' + "a" * MAX_GRAMMAR_CHARS + '"'),
        (RequestKind.JSON_SCHEMA, '{"title": "' + "a" * MAX_GRAMMAR_CHARS + '"}'),
        # Under the limit as Python values, over it once serialised.
        (RequestKind.JSON_SCHEMA, {"title": "a" * MAX_GRAMMAR_CHARS}),
        (RequestKind.CHOICE, ["a" * (MAX_GRAMMAR_CHARS // 2)] * 2),
    ],
)
def test_text_over_the_size_limit_is_refused(kind: RequestKind, source: Any) -> None:
    reason = refusal(kind, source)
    assert kind.value in reason
    assert str(MAX_GRAMMAR_CHARS) in reason
    # The refusal never echoes the oversized input.
    assert len(reason) < 200


# --- nesting depth ----------------------------------------------------------------


def test_nesting_at_the_limit_is_allowed() -> None:
    as_text = build(RequestKind.JSON_SCHEMA, nested_object_text(MAX_JSON_DEPTH))
    as_dict = build(RequestKind.JSON_SCHEMA, nested_dict(MAX_JSON_DEPTH))
    assert as_text == as_dict


@pytest.mark.parametrize(
    "source",
    [nested_object_text(MAX_JSON_DEPTH + 1), nested_dict(MAX_JSON_DEPTH + 1)],
    ids=["text", "dict"],
)
def test_nesting_one_over_the_limit_is_refused(source: Any) -> None:
    reason = refusal(RequestKind.JSON_SCHEMA, source)
    assert "json_schema" in reason
    assert f"more than {MAX_JSON_DEPTH} levels" in reason


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.JSON_SCHEMA, "[" * 100_000),
        (RequestKind.JSON_SCHEMA, "[" * 100_000 + "]" * 100_000),
        (RequestKind.JSON_SCHEMA, '{"a":' * 100_000 + "{}" + "}" * 100_000),
        (RequestKind.CHOICE, "[" * 100_000 + '"a"' + "]" * 100_000),
        (RequestKind.STRUCTURAL_TAG, "{" * 100_000),
    ],
    ids=["open-brackets", "balanced-brackets", "objects", "choice", "structural-tag"],
)
def test_very_deep_text_is_refused_without_recursion(kind: RequestKind, source: str) -> None:
    # A RecursionError would fail this test: pytest.raises only catches InvalidGrammarError.
    assert "levels" in refusal(kind, source)


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        (RequestKind.JSON_SCHEMA, lambda: nested_dict(10_000)),
        (RequestKind.JSON_SCHEMA, lambda: {"type": "array", "default": nested_list(10_000)}),
        (RequestKind.CHOICE, lambda: nested_list(10_000)),
        (RequestKind.STRUCTURAL_TAG, lambda: nested_dict(10_000)),
    ],
    ids=["dict", "list-in-dict", "choice", "structural-tag"],
)
def test_very_deep_python_value_is_refused_without_recursion(kind: RequestKind, make: Any) -> None:
    assert "levels" in refusal(kind, make())


def test_self_referencing_dict_is_refused() -> None:
    looped: dict[str, Any] = {"type": "object"}
    looped["properties"] = {"self": looped}
    assert "levels" in refusal(RequestKind.JSON_SCHEMA, looped)


def test_deep_tuples_are_counted_like_lists() -> None:
    # json.dumps writes tuples as arrays, so they nest the document as deeply.
    deep: Any = "x"
    for _ in range(10_000):
        deep = (deep,)
    assert "levels" in refusal(RequestKind.JSON_SCHEMA, {"type": "string", "enum": [deep]})


@pytest.mark.parametrize(
    "source",
    [
        '{"description": "' + "[" * 1000 + "{" * 1000 + '"}',
        '{"description": "' + "]" * 1000 + '", "title": "' + "[" * 1000 + '"}',
        # Escaped quotes do not end the string early.
        '{"description": "\\"' + "[" * 1000 + '\\""}',
        # An escaped backslash right before the closing quote does end it.
        '{"description": "\\\\", "title": "' + "{" * 1000 + '"}',
        '{"type": "string", "pattern": "' + "(" * 500 + "[a]" * 500 + ")" * 500 + '"}',
    ],
    ids=["open", "mixed", "escaped-quote", "escaped-backslash", "pattern"],
)
def test_brackets_inside_strings_do_not_count(source: str) -> None:
    spec = build(RequestKind.JSON_SCHEMA, source)
    assert json.loads(spec.text) == json.loads(source)


def test_brackets_in_dict_keys_and_values_do_not_count() -> None:
    source = {"[" * 200: "{" * 200, "title": "]" * 200}
    assert json.loads(build(RequestKind.JSON_SCHEMA, source).text) == source


def test_depth_counts_after_a_string_ends() -> None:
    # Depth 1 inside the string, then really nested past the limit.
    inner = nested_object_text(MAX_JSON_DEPTH)
    source = '{"description": "[[[[", "x": ' + inner + "}"
    assert "levels" in refusal(RequestKind.JSON_SCHEMA, source)


@pytest.mark.parametrize(
    ("key", "document"),
    [
        ("int", {"properties": {1: {"type": "integer"}, "1": {"type": "string"}}}),
        ("NoneType", {"enum": [{None: 1}]}),
        ("bool", {True: {}}),
    ],
)
def test_object_keys_that_are_not_strings_are_refused(key: str, document: Any) -> None:
    assert f"object key of type {key}" in refusal(RequestKind.JSON_SCHEMA, document)


# --- the depth scan reads each character at most twice ------------------------------

# What the scan replaced: remove every string literal, then follow the brackets.
# Right, but quadratic on an unclosed string of escaped quotes; here it only
# ever sees short texts.
_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def reference_depth(text: str) -> int:
    depth = deepest = 0
    for char in _LITERAL.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


# Every character the scan treats apart, and a few it does not.
JSONISH = st.text(alphabet='"\\[]{}a:, \n', max_size=40)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='"\\[]{}a\n\x01'),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet='"\\[]{}a'), children, max_size=4)
    ),
    max_leaves=20,
)


@given(JSONISH)
def test_the_scan_agrees_with_removing_literals_on_any_text(text: str) -> None:
    assert scan_json_depth(text).deepest == reference_depth(text)


@given(JSON_VALUES, st.data())
def test_the_scan_agrees_with_removing_literals_on_json_and_its_prefixes(
    value: Any, data: st.DataObject
) -> None:
    text = json.dumps(value)
    cut = data.draw(st.integers(0, len(text)))  # a prefix leaves a literal unclosed
    for sample in (text, text[:cut], text[cut:]):
        assert scan_json_depth(sample).deepest == reference_depth(sample)


# Texts that made the literal pattern start over at every quote, or that
# stress where the scan stops, of about ``2 * n`` characters.
HOSTILE: dict[str, Callable[[int], str]] = {
    "unclosed escaped quotes": lambda n: '"' + '\\"' * n,
    "unclosed backslashes": lambda n: '"' + "\\" * (2 * n),
    "lone backslash at the end": lambda n: '"' + "\\" * (2 * n - 1),
    "brackets after an unclosed quote": lambda n: '["' + "[\\" * n,
    "escaped quotes and brackets": lambda n: '"' + '\\"[' * n,
    "empty literals": lambda n: '""' * n,
    "nested quotes in arrays": lambda n: '["' * n,
    "closed after everything": lambda n: '"' + '\\"' * n + '"[]',
}


@pytest.mark.parametrize("shape", HOSTILE)
def test_a_hostile_text_of_the_size_limit_is_read_at_most_twice(shape: str) -> None:
    text = HOSTILE[shape](MAX_GRAMMAR_CHARS // 2)  # 1 MiB, give or take a few characters
    assert scan_json_depth(text).steps <= 2 * len(text)


@pytest.mark.parametrize("shape", HOSTILE)
def test_the_work_doubles_with_the_text_and_the_depth_matches_the_reference(shape: str) -> None:
    steps = [scan_json_depth(HOSTILE[shape](n)).steps for n in (1024, 2048, 4096)]
    assert steps[1] <= 2 * steps[0] + 4 and steps[2] <= 2 * steps[1] + 4
    small = HOSTILE[shape](64)
    assert scan_json_depth(small).deepest == reference_depth(small)


def test_the_unclosed_string_of_escaped_quotes_is_refused_as_json_not_waited_on() -> None:
    # Through the whole check: within the size limit, so the scan and the parser see it.
    source = '"' + '\\"' * ((MAX_GRAMMAR_CHARS - 1) // 2)
    assert "not valid JSON" in refusal(RequestKind.JSON_SCHEMA, source)


# --- quoting text in messages -----------------------------------------------------------


def test_a_short_text_is_quoted_whole() -> None:
    assert quoted_excerpt("format: email") == "'format: email'"


def test_line_breaks_and_escapes_are_quoted_not_written() -> None:
    quoted = quoted_excerpt("a\nINFO forged\r\x1b[2J\u2028b")
    assert quoted.isprintable() and "\n" not in quoted
    assert quoted == r"'a\nINFO forged\r\x1b[2J\u2028b'"


def test_a_long_text_is_cut_and_says_how_long_it_was() -> None:
    quoted = quoted_excerpt("\n" * 10_000)
    assert quoted.endswith("... (10000 characters)")
    assert len(quoted) < 3 * EXCERPT_CHARS
