"""Format patterns: each one is its format as the JSON-Schema-Test-Suite reads it.

Every string instance in the suite's file for a format is checked three ways:
with Python's ``re``, with xgrammar's JSON-schema grammar for the pattern (as
text, through :mod:`unit_tests.xgrammar_acceptance`), and with the plugin's
llguidance engine over a vocabulary of single bytes (the shared small
vocabulary lacks most of the characters these instances use). Each pattern is
compiled once per engine. Where a format's length is left to ``maxLength``
(``FORMAT_MAX_LENGTHS``), the check includes it, as the rewrite writes it.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from unit_tests.conftest import COMPACT
from unit_tests.llguidance_acceptance import byte_llguidance, llguidance_accepts
from unit_tests.xgrammar_acceptance import accepted, compile_schema, serialisations

from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.capabilities import PatternSupport
from grammar_guard.core.schema.formats import (
    FORMAT_MAX_LENGTHS,
    FORMAT_PATTERNS,
    format_max_length,
    format_pattern,
)
from grammar_guard.core.schema.regex_scan import pattern_problems

SUITE = (
    Path(__file__).resolve().parents[3]
    / "data/json-schema-test-suite/tests/draft2020-12/optional/format"
)
FORMATS = sorted(FORMAT_PATTERNS)
# The suite's files of each format, where it has more than the one named after it.
FILES = {"regex": ("regex", "ecmascript-regex")}
# Files of no format of the table: unknown formats are annotations.
LEFT_OUT = ["unknown"]

# xgrammar matches a pattern against the raw JSON text, so a character JSON
# escapes never comes out of a class that also holds plain characters: it
# refuses a valid value holding one (an over-constraint, noted in formats.py).
_JSON_ESCAPED = frozenset({'"', "\\", *map(chr, range(0x20))})


@dataclass(frozen=True)
class Instance:
    format: str
    value: str
    valid: bool
    description: str

    @property
    def enforced_valid(self) -> bool:
        """Valid, and of no kind formats.py refuses by design (see its docstring).

        Those are a leap second in local time (``time``, ``date-time``), a
        host-name label with hyphens in its 3rd and 4th position, which
        RFC 5891 section 4.2.3.1 reserves (``hostname``: the A-labels), any
        character but ASCII in an internationalized name (``idn-hostname``,
        ``idn-email``), and an ECMA-262 pattern with named groups or nested
        deeper than formats.py writes (``regex``).
        """
        if self.format in ("time", "date-time"):
            refused = ":60" in self.value and "23:59:60" not in self.value
        elif self.format in ("hostname", "idn-hostname", "idn-email"):
            domain = self.value.rpartition("@")[2]
            refused = not self.value.isascii() or any(
                label[2:4] == "--" for label in domain.split(".")
            )
        elif self.format == "regex":
            refused = "(?<" in self.value.replace("(?<=", "").replace("(?<!", "")
        else:
            refused = False
        return self.valid and not refused

    @property
    def within_length(self) -> bool:
        """Within the ``maxLength`` the rewrite writes next to the pattern, if any."""
        longest = format_max_length(self.format)
        return longest is None or len(self.value) <= longest


@functools.cache
def suite_instances(name: str) -> tuple[Instance, ...]:
    """The string instances of the suite's files for ``name`` (format ignores other types)."""
    groups = [
        group
        for file in FILES.get(name, (name,))
        for group in json.loads((SUITE / f"{file}.json").read_text(encoding="utf-8"))
    ]
    return tuple(
        Instance(name, test["data"], test["valid"], test["description"])
        for group in groups
        for test in group["tests"]
        if isinstance(test["data"], str)
    )


def _pattern_schema(name: str) -> dict[str, str]:
    return {"type": "string", "pattern": FORMAT_PATTERNS[name]}


def _schema(name: str) -> dict[str, str | int]:
    """The pattern, and the ``maxLength`` the rewrite writes beside it where there is one."""
    longest = format_max_length(name)
    length = {} if longest is None else {"maxLength": longest}
    return {**_pattern_schema(name), **length}


def _wrong(name: str, expected: dict[Instance, bool], accepts: dict[Instance, bool]) -> list[str]:
    return [
        f"{instance.value!r} ({instance.description}): expected "
        f"{'accepted' if expected[instance] else 'refused'}"
        for instance in suite_instances(name)
        if accepts[instance] != expected[instance]
    ]


def test_only_the_over_constraints_formats_py_lists_are_refused_by_design() -> None:
    refused = {
        (name, instance.value)
        for name in FORMATS
        for instance in suite_instances(name)
        if instance.valid and not instance.enforced_valid
    }
    leap_seconds = {
        ("time", "01:29:60+01:30"),
        ("time", "23:29:60+23:30"),
        ("time", "15:59:60-08:00"),
        ("time", "00:29:60-23:30"),
        ("date-time", "1998-12-31T15:59:60.123-08:00"),
    }
    # Every valid A-label: whether "xn--..." decodes to a valid U-label is
    # Punycode and IDNA2008, which no regular expression checks.
    a_labels = {
        ("hostname", value)
        for value in (
            "xn--9n2bp8q.xn--9t4b11yi5a",
            "xn--zca29lwxobi7a",
            "xn--qmbc",
            "xn--ll-0ea",
            "xn--wva3je",
            "xn--4dbc5h",
            "xn--4dbc8h",
            "xn--k8j5u",
            "xn--bck0j",
            "xn--vek778f",
            "xn--ngba1o",
            "xn--0-gyc",
            "xn--11b2ezcw70k",
            "xn--11b2ezcs70k",
            "xn--ngba5hb2804a",
        )
    }
    a_labels.add(("idn-hostname", "xn--ihqwcrb4cv8a8dqg056pqjye"))
    # The Unicode names: what IDNA2008 allows of Unicode is its tables and
    # context rules (the suite's "ZERO WIDTH JOINER not preceded by Virama"...).
    unicode_names = {
        (name, instance.value)
        for name in ("idn-hostname", "idn-email")
        for instance in suite_instances(name)
        if instance.valid and not instance.value.isascii()
    }
    assert len(unicode_names) == 30
    # A named group needs its name unique, and \k<name> a group of that name.
    named_groups = {("regex", "(?<name>x)"), ("regex", "(?<n>a)\\k<n>")}
    assert refused == leap_seconds | a_labels | unicode_names | named_groups


def test_a_host_name_label_is_refused_only_with_hyphens_in_its_3rd_and_4th_position() -> None:
    pattern = re.compile(FORMAT_PATTERNS["hostname"])
    for accepted_value in ("a--b", "a--bc", "ab-cd", "a-b-c", "ab-c-d", "x.y", "a" * 63):
        assert pattern.fullmatch(accepted_value), accepted_value
    for refused_value in ("ab--c", "xn--a", "XN--aa", "a.bc--d.e", "ab--", "a" * 64, "a-", ""):
        assert not pattern.fullmatch(refused_value), refused_value


def test_only_the_total_length_of_a_host_name_is_left_to_max_length() -> None:
    assert dict(FORMAT_MAX_LENGTHS) == {"hostname": 253, "idn-hostname": 253}
    assert set(FORMAT_MAX_LENGTHS) <= set(FORMAT_PATTERNS)
    # The suite's "exceeds maximum overall length": four 63-character labels and
    # "com", which the pattern accepts and maxLength refuses.
    (too_long,) = (i for i in suite_instances("hostname") if not i.within_length)
    assert not too_long.valid and len(too_long.value) == 259
    assert re.fullmatch(FORMAT_PATTERNS["hostname"], too_long.value)


def test_the_table_holds_the_regular_formats_only() -> None:
    assert set(FORMATS).isdisjoint(LEFT_OUT)
    files = {file for name in FORMATS for file in FILES.get(name, (name,))}
    assert {path.stem for path in SUITE.glob("*.json")} == {*files, *LEFT_OUT}
    assert all(format_pattern(name) == FORMAT_PATTERNS[name] for name in FORMATS)
    assert all(format_pattern(name) is None for name in LEFT_OUT)


@pytest.mark.parametrize("name", FORMATS)
def test_a_pattern_uses_only_what_both_engines_enforce(name: str) -> None:
    pattern = FORMAT_PATTERNS[name]
    assert pattern.startswith("^(?:") and pattern.endswith(")$")
    # No lookaround, inner anchor or Unicode-whitespace class (the plugin's own reading).
    assert pattern_problems(pattern, PatternSupport(escapes_json_specials=True)) == []
    # Escapes are of punctuation only: no \d, \w, \s, \b, \uXXXX or back-references.
    escaped = re.findall(r"\\(.)", pattern, flags=re.DOTALL)
    assert all(not char.isalnum() for char in escaped), sorted(set(escaped))
    # xgrammar misreads "(...)?" (see the test below); formats.py writes "{0,1}".
    assert ")?" not in re.sub(r"\\.", "", pattern)


def test_xgrammar_misreads_an_optional_group_that_starts_with_a_loop() -> None:
    """Why formats.py writes ``{0,1}``: once this fails, xgrammar reads ``?`` right."""
    question = compile_schema({"type": "string", "pattern": "^(?:b*c)?$"})
    braces = compile_schema({"type": "string", "pattern": "^(?:b*c){0,1}$"})
    assert accepted(question, "b")  # wrong: "b" has no "c"
    assert not accepted(braces, "b")
    assert accepted(braces, "bc") and accepted(braces, "")


@pytest.mark.parametrize("name", FORMATS)
def test_python_re_agrees_with_the_suite(name: str) -> None:
    pattern = re.compile(FORMAT_PATTERNS[name])
    instances = suite_instances(name)
    expected = {instance: instance.enforced_valid for instance in instances}
    accepts = {
        instance: pattern.fullmatch(instance.value) is not None and instance.within_length
        for instance in instances
    }
    assert _wrong(name, expected, accepts) == []


@pytest.mark.parametrize("name", FORMATS)
def test_xgrammar_agrees_with_the_suite(name: str) -> None:
    # The pattern alone: xgrammar ignores a maxLength next to a pattern (the
    # analysis refuses that, so llguidance serves such a format), so the
    # length is checked here as the other engine enforces it.
    compiled = compile_schema(_pattern_schema(name))
    instances = suite_instances(name)
    expected = {
        instance: instance.enforced_valid and not (_JSON_ESCAPED & set(instance.value))
        for instance in instances
    }
    accepts = {
        instance: accepted(compiled, instance.value) and instance.within_length
        for instance in instances
    }
    assert _wrong(name, expected, accepts) == []


@pytest.mark.parametrize("name", FORMATS)
def test_llguidance_agrees_with_the_suite(name: str) -> None:
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, _schema(name), COMPACT)
    compiled = byte_llguidance().compile(spec)
    instances = suite_instances(name)
    expected = {instance: instance.enforced_valid for instance in instances}
    # A non-ASCII character may come raw or \u-escaped; either spelling counts.
    accepts = {
        instance: any(llguidance_accepts(compiled, text) for text in serialisations(instance.value))
        for instance in instances
    }
    assert _wrong(name, expected, accepts) == []
