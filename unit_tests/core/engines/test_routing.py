"""Routing each key to the engine that enforces it, and compiling, matching, storing there."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from unit_tests.conftest import COMPACT, EOS, VOCAB, SmallTokenizer

from grammar_guard.core.engine_names import EngineName
from grammar_guard.core.engines.llguidance import rewrite as llguidance_rewrite
from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.llguidance.rewrite import EngineDoesNotSupport
from grammar_guard.core.engines.routed import RoutedEngine, RoutedRecipe
from grammar_guard.core.engines.routing import NARROWED_MAX_CHARS, route
from grammar_guard.core.engines.xgrammar import rewrite as xgrammar_rewrite
from grammar_guard.core.engines.xgrammar.cost import (
    SLOW_SPEC_CHARS,
    slow_for_xgrammar,
    xgrammar_over_constrains,
)
from grammar_guard.core.errors import (
    InvalidGrammarError,
    PastEngineLimitsError,
    UnenforcedKeywordError,
)
from grammar_guard.core.masks.fill import fill_by_engine
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import EngineSelection, UnenforcedPolicy

PLAIN = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
LONG_STRING = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 200}}}
# Merged into one schema (schema/rewrite.py), which xgrammar enforces.
ALL_OF = {"allOf": [{"type": "integer"}, {"minimum": 2}]}
# Two patterns merge into no one pattern: xgrammar would drop the allOf; llguidance merges it.
TWO_PATTERNS = {"allOf": [{"type": "string", "pattern": "^a+$"}, {"pattern": "^a{2,3}$"}]}
# llguidance does not implement propertyNames; xgrammar's path enforces it.
PROPERTY_NAMES = {"type": "object", "propertyNames": {"pattern": "^a"}}
NEITHER = {"type": "array", "uniqueItems": True}  # neither enforces it, nothing narrows it
# Members left open: xgrammar writes them with ", " even in compact mode.
OPEN_MEMBER = {"type": "object", "properties": {"meta": {"type": "object"}}, "required": ["meta"]}
BOUNDED_ANY_ARRAY = {"type": "array", "maxItems": 3}  # xgrammar admits only []
SEARCHED_PATTERN = {"type": "string", "pattern": "^ab"}  # xgrammar matches it whole
# ECMA-262's \s, written out as a class: xgrammar keeps only the members JSON writes plain.
WHITESPACE = {"type": "string", "pattern": "^\\s$"}
# Listed names JSON writes escaped, next to other names of another type.
ESCAPED_NAMES = {
    "type": "object",
    "properties": {"a\nb": {"type": "number"}, 'a"b': {"type": "number"}},
    "additionalProperties": {"type": "string"},
}
TAG = {"structures": [{"begin": "<a>", "schema": PLAIN, "end": "</a>"}], "triggers": ["<a>"]}


def _json(schema: Any) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, COMPACT)


@pytest.mark.parametrize(
    ("spec", "engine"),
    [
        (_json(PLAIN), EngineName.XGRAMMAR),
        (_json(LONG_STRING), EngineName.LLGUIDANCE),
        (_json(ALL_OF), EngineName.XGRAMMAR),
        (_json(TWO_PATTERNS), EngineName.LLGUIDANCE),
        (_json(PROPERTY_NAMES), EngineName.XGRAMMAR),
        (_json(WHITESPACE), EngineName.LLGUIDANCE),
        (GrammarSpec.build(RequestKind.STRUCTURAL_TAG, TAG, COMPACT), EngineName.XGRAMMAR),
        (GrammarSpec.build(RequestKind.REGEX, "[a-z]{0,100}", COMPACT), EngineName.LLGUIDANCE),
        (GrammarSpec.build(RequestKind.REGEX, "[a-z]{0,10}", COMPACT), EngineName.XGRAMMAR),
    ],
)
def test_each_key_goes_to_an_engine_that_enforces_it_fastest(
    spec: GrammarSpec, engine: EngineName
) -> None:
    assert route(spec).engine is engine


def test_a_schema_neither_engine_enforces_is_refused_with_the_keywords_location() -> None:
    with pytest.raises(UnenforcedKeywordError, match="'uniqueItems' at /uniqueItems"):
        route(_json(NEITHER))


def test_under_the_warn_policy_xgrammar_serves_what_neither_enforces() -> None:
    chosen = route(_json(NEITHER), unenforced=UnenforcedPolicy.WARN)
    assert chosen.engine is EngineName.XGRAMMAR
    assert [finding.keyword for finding in chosen.findings] == ["uniqueItems"]


def test_a_forced_engine_serves_every_key_or_says_why_not() -> None:
    forced = EngineSelection.LLGUIDANCE
    assert route(_json(PLAIN), selection=forced).engine is EngineName.LLGUIDANCE
    with pytest.raises(UnenforcedKeywordError):
        route(_json(PROPERTY_NAMES), selection=forced)
    with pytest.raises(EngineDoesNotSupport):
        route(GrammarSpec.build(RequestKind.STRUCTURAL_TAG, TAG, COMPACT), selection=forced)
    assert route(_json(LONG_STRING), selection=EngineSelection.XGRAMMAR).engine is (
        EngineName.XGRAMMAR
    )


@pytest.mark.parametrize(
    ("schema", "slow"),
    [
        ({"type": "string", "maxLength": 8}, True),
        ({"type": "string", "maxLength": 7}, False),
        ({"type": "array", "items": {"type": "string", "minLength": 30}}, True),
        ({"type": "array", "maxItems": 1000}, False),
        ({"type": "string", "pattern": "^[a-z]{2,80}$"}, True),
        ({"enum": [{"maxLength": 500}]}, False),  # a value, not a keyword
        ({"enum": [f"value-{n}" for n in range(8000)]}, True),  # large whatever its shape
    ],
)
def test_slow_bounds_are_found_where_they_are_keywords(schema: Any, slow: bool) -> None:
    assert slow_for_xgrammar(_json(schema)) is slow


# An attacker's regex once planned quick (each count under 64) that xgrammar
# compiled for 16.6 s: its counts add up, and a negated class costs eight times
# a narrow one (measured in xgrammar_cost.py).
BEATEN = "".join(f"[^{letter}]{{0,63}}" for letter in "abcdefgh")


@pytest.mark.parametrize(
    ("regex", "slow"),
    [
        ("[a-z]{0,63}", False),  # 0.15 s on the 129k vocabulary
        ("[a-z]{0,64}", True),
        ("[a-z]{0,32}[0-9]{0,32}", True),  # counts add up
        ("[0-9]{4}-[0-9]{2}-[0-9]{2}", False),  # a date: 8 narrow units
        ("[^a]{0,7}", False),
        ("[^a]{0,8}", True),  # 8 wide units: as costly as [a-z]{0,64}
        ('[^"]{0,63}', True),  # 1.4 s on its own
        (".{0,8}", True),
        ("\\.{0,8}", False),  # an escaped dot is one character
        ("\\W{0,8}", True),
        ("(ab){0,63}", False),  # 3 ms: a group is as wide as what it holds
        ("(?:[^a]|a){0,7}", False),
        ("(?:[^a]|a){0,8}", True),  # any character: {0,23} took 0.2 s
        (BEATEN, True),
    ],
)
def test_repetitions_are_slow_by_their_weighed_sum(regex: str, slow: bool) -> None:
    spec = GrammarSpec.build(RequestKind.REGEX, regex, COMPACT)
    assert slow_for_xgrammar(spec) is slow
    assert route(spec).engine is (EngineName.LLGUIDANCE if slow else EngineName.XGRAMMAR)


@pytest.mark.parametrize(
    ("schema", "compact", "over"),
    [
        (PLAIN, True, False),
        (OPEN_MEMBER, True, True),
        (OPEN_MEMBER, False, False),  # with whitespace allowed, ", " is valid output
        ({"type": "object", "additionalProperties": {}}, True, True),
        ({"type": "array", "items": True}, True, True),
        ({"type": "object", "properties": {"a": {"description": "anything"}}}, True, True),
        ({"type": "object", "propertyNames": {"pattern": "^a[a-z]*$"}}, True, False),
        (BOUNDED_ANY_ARRAY, False, True),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 3}, True, False),
        (SEARCHED_PATTERN, False, True),
        ({"type": "string", "pattern": "^ab$"}, False, False),
        ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}}, False, True),
        ({"type": "string", "pattern": "^[a\\n]+$"}, False, True),
        ({"type": "string", "pattern": "^[ -~]*$"}, False, True),
        ({"type": "object", "patternProperties": {"^[a\\t]$": {}}}, False, True),
        ({"type": "string", "pattern": "^[^\\n]+$"}, False, False),
        ({"enum": [{"type": "object"}]}, True, False),  # a value, not a schema
    ],
)
def test_constructs_xgrammar_over_constrains_are_found_where_they_are_schemas(
    schema: Any, compact: bool, over: bool
) -> None:
    options = COMPACT if compact else CompileOptions(any_whitespace=True)
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, options)
    assert xgrammar_over_constrains(spec) is over


def test_an_over_constrained_schema_stays_on_xgrammar_when_llguidance_refuses_it() -> None:
    # Its name pattern is matched whole by xgrammar; llguidance has no propertyNames.
    assert xgrammar_over_constrains(_json(PROPERTY_NAMES))
    assert route(_json(PROPERTY_NAMES)).engine is EngineName.XGRAMMAR


def _accepts(routed: RoutedEngine, spec: GrammarSpec, text: str) -> bool:
    compiled = routed.compile(spec)
    matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    tokens = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in tokens) and matcher.is_terminated()


@pytest.mark.parametrize(
    ("schema", "text", "accepted"),
    [
        (PLAIN, '{"a":1}', True),
        (PLAIN, '{"a":"x"}', False),
        (LONG_STRING, '{"a":"hello"}', True),
        (ALL_OF, "1", False),
        (ALL_OF, "2", True),
        (TWO_PATTERNS, '"aa"', True),
        (TWO_PATTERNS, '"aaaa"', False),
        (OPEN_MEMBER, '{"meta":{"a":1,"b":[2,3]}}', True),
        (OPEN_MEMBER, '{"meta":[]}', False),
        (BOUNDED_ANY_ARRAY, "[1,2]", True),
        (BOUNDED_ANY_ARRAY, "[1,2,3,4]", False),
        (SEARCHED_PATTERN, '"abc"', True),
        (SEARCHED_PATTERN, '"cab"', False),
        (WHITESPACE, '"\\t"', True),
        (WHITESPACE, '"\\n"', True),
        (WHITESPACE, '" "', True),
        (WHITESPACE, '"\t"', False),  # raw, which JSON forbids
        (WHITESPACE, '"a"', False),
        # xgrammar would take the escaped names as additional properties, strings.
        (ESCAPED_NAMES, '{"a\\nb":1,"a\\"b":2,"c":"x"}', True),
        (ESCAPED_NAMES, '{"a\\nb":"1"}', False),
        (ESCAPED_NAMES, '{"a\\"b":"1"}', False),
    ],
)
def test_the_routed_engine_enforces_through_whichever_engine_it_chose(
    routed: RoutedEngine, schema: Any, text: str, accepted: bool
) -> None:
    assert _accepts(routed, _json(schema), text) is accepted


def test_a_stored_grammar_comes_back_on_its_own_engine(routed: RoutedEngine) -> None:
    for schema in (PLAIN, LONG_STRING):
        compiled = routed.compile(_json(schema))
        loaded = routed.deserialize(routed.serialize(compiled))
        assert loaded.engine is compiled.engine
    for garbage in (b"", b"other\n{}", b"xgrammar"):
        with pytest.raises(ValueError):
            routed.deserialize(garbage)


def test_a_mixed_batch_is_filled_as_each_engine_fills_its_rows(routed: RoutedEngine) -> None:
    matchers = [
        routed.new_matcher(
            routed.compile(_json(schema)), stop_token_ids=None, max_rollback_tokens=0
        )
        for schema in (PLAIN, LONG_STRING, PLAIN)
    ]
    width = (len(VOCAB) + 31) // 32
    expected = torch.zeros((3, width), dtype=torch.int32)
    for row, matcher in enumerate(matchers):
        matcher.fill_bitmask(expected, row)
    filled = torch.zeros((3, width), dtype=torch.int32)
    fill_by_engine(matchers, filled, [0, 1, 2], threads=2)
    assert torch.equal(filled, expected)


def test_the_fingerprint_changes_with_the_selection(
    small: SmallTokenizer, small_llguidance: LLGuidanceEngine
) -> None:
    auto = RoutedEngine(small.engine, small_llguidance)
    forced = RoutedEngine(small.engine, small_llguidance, EngineSelection.XGRAMMAR)
    assert auto.fingerprint != forced.fingerprint


def test_a_schema_proved_unsatisfiable_is_refused_for_that_not_for_a_keyword(
    routed: RoutedEngine,
) -> None:
    with pytest.raises(InvalidGrammarError, match="Unsatisfiable schema: incompatible types"):
        routed.compile(_json({"allOf": [{"type": "integer"}, {"type": "string"}]}))


class _RecordingEngine:
    """An engine recipe's product that counts tokenizer loads."""

    vocab_size = 8
    unenforced = UnenforcedPolicy.REFUSE

    def __init__(self) -> None:
        self.tokenizer_loads = 0

    def build(self) -> _RecordingEngine:
        return self

    def load_tokenizer(self) -> None:
        self.tokenizer_loads += 1


@pytest.mark.parametrize(
    ("selection", "loads"),
    [(EngineSelection.AUTO, 1), (EngineSelection.LLGUIDANCE, 1), (EngineSelection.XGRAMMAR, 0)],
)
def test_a_compile_process_builds_llguidances_tokenizer_at_start_unless_never_routed_there(
    selection: EngineSelection, loads: int
) -> None:
    # Not on the first llguidance compile, where it made a short compile timeout run out.
    llguidance = _RecordingEngine()
    RoutedRecipe(_RecordingEngine(), llguidance, selection).build()  # type: ignore[arg-type]
    assert llguidance.tokenizer_loads == loads


def _word_list(count: int) -> GrammarSpec:
    words = " | ".join(f'"word{number:05d}"' for number in range(count))
    return GrammarSpec.build(RequestKind.GRAMMAR, f"root ::= {words}", COMPACT)


def test_a_grammar_past_llguidances_parser_goes_to_xgrammar_unless_too_large_for_it() -> None:
    """3,000 words (40 kB) compile on xgrammar in milliseconds; 6,000 (80 kB) would take seconds.

    Neither fits a row of llguidance's parser. The large one is refused at
    once, where it would otherwise compile in the background for longer
    than a request waits.
    """
    assert route(_word_list(3000)).engine is EngineName.XGRAMMAR
    large = _word_list(6000)
    assert len(large.text) >= SLOW_SPEC_CHARS
    with pytest.raises(PastEngineLimitsError, match="alternation of 6,000 items"):
        route(large)
    # A forced engine is the operator's choice: xgrammar still takes it.
    assert route(large, selection=EngineSelection.XGRAMMAR).engine is EngineName.XGRAMMAR


def test_a_refusal_names_what_the_client_wrote_not_what_the_rewrite_wrote() -> None:
    # The rewrite writes a host name as a pattern and a maxLength, and a
    # `not` of everything as `false`: neither is the client's text, and
    # llguidance's proof of an unsatisfiable schema names the part.
    hostname = {
        "type": "object",
        "properties": {"h": {"type": "string", "format": "hostname"}},
        "propertyNames": {"pattern": "^h"},
    }
    with pytest.raises(UnenforcedKeywordError) as refused:
        route(_json(hostname))
    assert "'format: hostname' at /properties/h/format" in refused.value.reason
    assert "maxLength" not in refused.value.reason
    with pytest.raises(InvalidGrammarError, match="or a 'not' of every value"):
        route(_json({"not": {}}))
    with pytest.raises(InvalidGrammarError, match="required property 'a' is unsatisfiable"):
        route(_json({"type": "object", "properties": {"a": {"not": {}}}, "required": ["a"]}))


def _system(name: str) -> dict[str, Any]:
    return {"type": "object", "required": ["system"], "properties": {"system": {"const": name}}}


# Told apart by "meta", which no branch requires: an object without it and with
# "sum" of "ab" is valid for both branches, so the oneOf is not exclusive as written.
OPTIONAL_DISCRIMINATOR = {
    "type": "object",
    "oneOf": [
        {"properties": {"meta": _system("rpm"), "sum": {"type": "string", "pattern": "^[a-f]+$"}}},
        {"properties": {"meta": _system("deb"), "sum": {"type": "string", "pattern": "^[a-f]*$"}}},
    ],
}


def test_a_one_of_told_apart_by_a_property_none_requires_is_served_requiring_it(
    routed: RoutedEngine,
) -> None:
    spec = _json(OPTIONAL_DISCRIMINATOR)
    chosen = route(spec)
    assert chosen.narrowed_text is not None and '"meta"' in chosen.narrowed_text
    assert _accepts(routed, spec, '{"meta":{"system":"rpm"},"sum":"ab"}')
    assert _accepts(routed, spec, '{"meta":{"system":"deb"},"sum":""}')
    # Valid for neither branch, or for both: refused as the oneOf refuses it.
    assert not _accepts(routed, spec, '{"meta":{"system":"rpm"},"sum":""}')
    assert not _accepts(routed, spec, '{"sum":"ab"}')
    # The over-constraint: valid for the second branch alone, but without "meta".
    assert not _accepts(routed, spec, '{"sum":""}')


def test_a_one_of_an_engine_serves_as_written_is_never_narrowed() -> None:
    # Closed, each branch lacks a name the other requires: exclusive on both engines.
    shapes = {
        "type": "object",
        "oneOf": [
            {"properties": {"shape": {"const": "r"}}, "required": ["l", "w"]},
            {"properties": {"shape": {"const": "c"}}, "required": ["r"]},
        ],
        "properties": {"l": {"type": "number"}, "w": {"type": "number"}, "r": {"type": "number"}},
    }
    assert route(_json(shapes)).narrowed_text is None
    # Neither narrowed nor served: no property tells these branches apart.
    with pytest.raises(UnenforcedKeywordError):
        route(_json({"oneOf": [{"type": "integer"}, {"minimum": 2}]}))


def test_a_contains_is_served_with_its_match_among_the_first_four_items(
    routed: RoutedEngine,
) -> None:
    spec = _json({"type": "array", "items": {"type": "integer"}, "contains": {"const": 1}})
    assert route(spec).narrowed_text is not None
    for text in ("[1]", "[0,1]", "[2,0,3,1,1]"):
        assert _accepts(routed, spec, text), text
    for text in ("[]", "[0]", "[0,2,3]", '[0,"1"]'):
        assert not _accepts(routed, spec, text), text
    # The over-constraint: a valid array whose first match comes fifth.
    assert not _accepts(routed, spec, "[0,0,0,0,1]")


def test_a_not_written_as_a_contains_is_refused_as_the_not_the_client_wrote() -> None:
    # not {items: {not: X}} is a contains of X, which cannot be narrowed beside prefixItems.
    schema = {"type": "array", "prefixItems": [{}], "not": {"items": {"not": {"type": "integer"}}}}
    with pytest.raises(UnenforcedKeywordError, match="'not' at /not;"):
        route(_json(schema))


def test_a_schema_past_the_narrowing_bound_is_refused_as_written() -> None:
    padded = {**OPTIONAL_DISCRIMINATOR, "description": "x" * NARROWED_MAX_CHARS}
    with pytest.raises(UnenforcedKeywordError, match="oneOf"):
        route(_json(padded))


@pytest.mark.parametrize("long_string", [False, True], ids=["xgrammar", "llguidance"])
def test_a_small_spec_is_parsed_once_from_its_plan_to_its_in_thread_compile(
    small: SmallTokenizer,
    small_llguidance: LLGuidanceEngine,
    monkeypatch: pytest.MonkeyPatch,
    long_string: bool,
) -> None:
    """Routing's check parses and analyses a key; the compile that follows reuses that."""
    parses: list[str] = []
    xgrammar_parse = xgrammar_rewrite._PARSERS[RequestKind.JSON_SCHEMA]
    llguidance_grammar = llguidance_rewrite._grammar

    def counted_xgrammar_parse(spec: GrammarSpec, text: str) -> Any:
        parses.append("xgrammar")
        return xgrammar_parse(spec, text)

    def counted_llguidance_grammar(spec: GrammarSpec, *, lenient: bool) -> str:
        parses.append("llguidance")
        return llguidance_grammar(spec, lenient=lenient)

    monkeypatch.setitem(xgrammar_rewrite._PARSERS, RequestKind.JSON_SCHEMA, counted_xgrammar_parse)
    monkeypatch.setattr(llguidance_rewrite, "_grammar", counted_llguidance_grammar)
    # A fresh engine and a key no other test uses: nothing remembered before.
    routed = RoutedEngine(small.engine, small_llguidance)
    value = {"type": "string", "maxLength": 200} if long_string else {"type": "integer"}
    spec = _json({"type": "object", "properties": {"parsed-once": value}})
    engine = routed.plan(spec).engine
    routed.compile(spec)
    # Each engine routing asked parsed it once (the llguidance key's upgrade
    # check asks xgrammar too); the compiling engine did not parse it again.
    assert engine is not None and parses.count(engine.value) == 1
    assert len(parses) == len(set(parses))
