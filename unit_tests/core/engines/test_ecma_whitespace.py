"""ECMA-262's ``\\s`` and ``\\S`` written out: the strings ECMA-262 matches, and no others.

Three layers: the scan (what it writes, and what it leaves alone), the
written classes against ECMA-262's definition over every BMP character
(read by Python's ``re``, which reads the escapes as ECMA-262 does), and both
engines against the JSON-Schema-Test-Suite's own cases for ``\\s`` and ``\\S``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

import pytest
from harness.schema_data.cases import SAMPLE_DATA_DIR
from unit_tests.conftest import COMPACT
from unit_tests.llguidance_acceptance import byte_llguidance, llguidance_accepts
from unit_tests.xgrammar_acceptance import accepted, compile_schema, serialisations

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.routing import route
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.ecma_whitespace import (
    MAX_WRITTEN,
    WHITESPACE_MEMBERS,
    whitespace_written_out,
)
from grammar_guard.core.schema.rewrite import rewrite_schema

SPACE = f"[{WHITESPACE_MEMBERS}]"
NOT_SPACE = f"[^{WHITESPACE_MEMBERS}]"
# ECMA-262: WhiteSpace is TAB, VT, FF, ZWNBSP and the Space_Separator
# category; LineTerminator is LF, CR, LS and PS.
ECMA_SPACE = frozenset(
    {chr(code) for code in range(0x10000) if unicodedata.category(chr(code)) == "Zs"}
    | set("\t\x0b\x0c\ufeff\n\r\u2028\u2029")
)


@pytest.mark.parametrize(
    ("pattern", "written"),
    [
        (r"^\S+@\S+$", f"^{NOT_SPACE}+@{NOT_SPACE}+$"),
        (r"a\sb", f"a{SPACE}b"),
        (r"[\s,]+", f"[{WHITESPACE_MEMBERS},]+"),
        (r"[^\s]", f"[^{WHITESPACE_MEMBERS}]"),
        (r"[\]\s]", f"[\\]{WHITESPACE_MEMBERS}]"),
        (r"[a\s-]", f"[a{WHITESPACE_MEMBERS}-]"),
        # nothing to write
        ("abc", None),
        (r"\\s", None),  # an escaped backslash, then "s"
        (r"\d\w", None),
        # what no class without subtraction says, or what would become a range
        (r"[a\S]", None),
        (r"[\s-z]", None),
        (r"[a-\s]", None),
        # ECMA-262's empty classes, which other dialects read otherwise
        (r"[]\s", None),
        (r"[^]\s", None),
    ],
)
def test_the_scan_writes_out_each_class_escape_it_can(pattern: str, written: str | None) -> None:
    assert whitespace_written_out(pattern) == written


def test_a_pattern_with_more_escapes_than_the_bound_stays_as_written() -> None:
    assert whitespace_written_out(r"\S" * MAX_WRITTEN) == NOT_SPACE * MAX_WRITTEN
    assert whitespace_written_out(r"\S" * (MAX_WRITTEN + 1)) is None


def test_the_written_classes_hold_ecma_262s_whitespace_exactly() -> None:
    space = re.compile(f"^{SPACE}$")
    not_space = re.compile(f"^{NOT_SPACE}$")
    for char in map(chr, range(0x10000)):
        assert bool(space.match(char)) is (char in ECMA_SPACE), f"U+{ord(char):04X}"
        assert bool(not_space.match(char)) is (char not in ECMA_SPACE), f"U+{ord(char):04X}"
    assert not_space.match("\U0001f600")


def _suite_cases() -> list[tuple[dict[str, Any], Any, bool]]:
    path = (
        SAMPLE_DATA_DIR / "json-schema-test-suite/tests/draft2020-12/optional/ecmascript-regex.json"
    )
    return [
        (group["schema"], test["data"], test["valid"])
        for group in json.loads(path.read_text())
        if group["schema"].get("pattern") in (r"^\s$", r"^\S$")
        for test in group["tests"]
    ]


SUITE_CASES = _suite_cases()


def test_the_suite_cases_are_here() -> None:
    assert len(SUITE_CASES) == 22


@pytest.mark.parametrize("engine", list(EngineName))
def test_both_engines_enforce_the_suites_whitespace_cases(engine: EngineName) -> None:
    """Every invalid string refused; every valid one accepted, but those JSON writes escaped.

    Neither engine writes a control character as a JSON escape inside a
    pattern (a tab, or U+0001 for ``\\S``): refusing those is stricter,
    never looser.
    """
    wrong = []
    for schema, value, valid in SUITE_CASES:
        if engine is EngineName.XGRAMMAR:
            accepts = accepted(compile_schema(rewrite_schema(schema)), value)
        else:
            spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)
            compiled = byte_llguidance().compile(spec)
            accepts = any(llguidance_accepts(compiled, text) for text in serialisations(value))
        escaped_in_json = value < " "
        if accepts is not valid and not (valid and escaped_in_json):
            wrong.append((schema["pattern"], value, valid))
    assert wrong == []


@pytest.mark.parametrize("pattern", [r"^\S+@\S+$", r"^[^\s]*$", r"^(?:\S+\s+){0,9}\S+$"])
def test_a_pattern_with_non_space_classes_is_served(pattern: str) -> None:
    # Refused before: the engines' own \S lets a no-break space through.
    schema = {"type": "string", "pattern": pattern}
    route(GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT))
