"""Huge repetition counts from a client end as the plugin's own answer, never a Python error.

A count of thousands of digits used to raise Python's ``ValueError`` about
``set_int_max_str_digits`` (its text reached the client), and one of a few
hundred digits overflowed the float compile estimate, in a ``$defs`` entry
nothing references too.
"""

from __future__ import annotations

from typing import Any

import pytest

from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.xgrammar.cost import slow_for_xgrammar, xgrammar_compile_estimate_s
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.repeat_count import REPEAT_COUNT_CAP, repeat_count
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

DIGITS = {"400 nines": "9" * 400, "5000 nines": "9" * 5000, "eight nines": "9" * 8}
HOSTILE: dict[str, tuple[RequestKind, Any]] = {
    **{
        f"regex of {name}": (RequestKind.REGEX, "a{" + digits + "}")
        for name, digits in DIGITS.items()
    },
    **{
        f"pattern of {name}": (RequestKind.JSON_SCHEMA, {"type": "string", "pattern": f"a{{{d}}}"})
        for name, d in DIGITS.items()
    },
    "unused $defs pattern": (
        RequestKind.JSON_SCHEMA,
        {"type": "string", "maxLength": 10, "$defs": {"u": {"pattern": "a{" + "9" * 400 + "}"}}},
    ),
    "range of 5000 digits": (RequestKind.REGEX, "a{1," + "9" * 5000 + "}"),
    "grammar of 5000 digits": (RequestKind.GRAMMAR, 'root ::= "a"{' + "9" * 5000 + "}"),
}


@pytest.mark.parametrize(
    ("digits", "expected"),
    [
        ("0", 0),
        ("007", 7),
        ("64", 64),
        (str(REPEAT_COUNT_CAP), REPEAT_COUNT_CAP),
        (str(REPEAT_COUNT_CAP + 1), REPEAT_COUNT_CAP),
        ("9" * 5000, REPEAT_COUNT_CAP),
        ("0" * 5000 + "12", 12),
    ],
)
def test_a_count_is_read_exactly_up_to_the_cap(digits: str, expected: int) -> None:
    assert repeat_count(digits) == expected


@pytest.mark.parametrize("name", HOSTILE)
def test_the_cost_estimates_take_any_count(name: str) -> None:
    kind, value = HOSTILE[name]
    spec = GrammarSpec.build(kind, value, CompileOptions(any_whitespace=False))
    # Every one bounds a repetition past 64, or a string past 8: slow for xgrammar.
    assert slow_for_xgrammar(spec)
    assert xgrammar_compile_estimate_s(spec) < float("inf")


@pytest.mark.parametrize("name", HOSTILE)
def test_a_routed_compile_serves_or_refuses_with_its_own_message(
    routed: RoutedEngine, name: str
) -> None:
    kind, value = HOSTILE[name]
    spec = GrammarSpec.build(kind, value, CompileOptions(any_whitespace=False))
    try:
        compiled = routed.compile(spec)
    except InvalidGrammarError as error:
        assert "set_int_max_str_digits" not in str(error)
        assert "too large to convert" not in str(error)
    else:
        assert compiled is not None
