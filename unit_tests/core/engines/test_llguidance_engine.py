"""The llguidance engine: what it enforces, what it refuses and why, stop tokens, batches."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import llguidance
import pytest
import torch
from unit_tests.conftest import COMPACT, DEFAULT, EOS, EOT, VOCAB, small_llguidance_tokenizer
from unit_tests.llguidance_acceptance import ByteVocabulary, byte_llguidance, llguidance_accepts

from grammar_guard.core.engines.llguidance.engine import LLGuidanceEngine
from grammar_guard.core.engines.llguidance.matcher import LLGuidanceMatcher
from grammar_guard.core.engines.llguidance.rewrite import EngineDoesNotSupport
from grammar_guard.core.errors import (
    InvalidGrammarError,
    PastEngineLimitsError,
    UnenforcedKeywordError,
)
from grammar_guard.core.masks import fill as bitmask_fill
from grammar_guard.core.masks.fill import RowFill
from grammar_guard.core.masks.guard import GuardedMatcher
from grammar_guard.core.request.failures import FailureClass
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.settings import UnenforcedPolicy


def _ids(text: str) -> list[int]:
    return [VOCAB.index(char) for char in text]


def _spec(kind: RequestKind, source: Any, options: Any = COMPACT) -> GrammarSpec:
    return GrammarSpec.build(kind, source, options)


def _matcher(
    engine: LLGuidanceEngine, spec: GrammarSpec, stops: set[int] | None = None
) -> LLGuidanceMatcher:
    return engine.new_matcher(engine.compile(spec), stop_token_ids=stops, max_rollback_tokens=0)


def _matches(engine: LLGuidanceEngine, spec: GrammarSpec, text: str) -> bool:
    matcher = _matcher(engine, spec)
    if not all(matcher.accept_token(token) for token in _ids(text)):
        return False
    return matcher.accept_token(VOCAB.index(EOS)) and matcher.is_terminated()


def _allowed(matcher: LLGuidanceMatcher, token: str) -> bool:
    bitmask = torch.zeros((1, (len(VOCAB) + 31) // 32), dtype=torch.int32)
    matcher.fill_bitmask(bitmask, 0)
    token_id = VOCAB.index(token)
    return bool((int(bitmask[0, token_id // 32]) >> (token_id % 32)) & 1)


OBJECT = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
# An object whose oneOf branch brings a property of its own, which it requires.
KIND_BRANCH = {
    **OBJECT,
    "oneOf": [{"properties": {"kind": {"const": "k"}}, "required": ["kind"]}],
}


@pytest.mark.parametrize(
    ("kind", "source", "options", "text", "matches"),
    [
        (RequestKind.JSON_SCHEMA, OBJECT, COMPACT, '{"a":12}', True),
        (RequestKind.JSON_SCHEMA, OBJECT, COMPACT, '{"a": 12}', False),
        (RequestKind.JSON_SCHEMA, OBJECT, DEFAULT, '{ "a" : 12 }', True),
        (RequestKind.JSON_SCHEMA, OBJECT, COMPACT, '{"b":1}', False),
        # formats it knows are exact
        (RequestKind.JSON_SCHEMA, {"type": "string", "format": "ipv4"}, COMPACT, '"1.2.3.4"', True),
        (
            RequestKind.JSON_SCHEMA,
            {"type": "string", "format": "ipv4"},
            COMPACT,
            '"256.1.1.1"',
            False,
        ),
        (RequestKind.JSON_SCHEMA, {"type": "string", "format": "ipv4"}, COMPACT, '"1.2.3"', False),
        # raw control characters never get into a bounded string
        (RequestKind.JSON_SCHEMA, {"type": "string", "maxLength": 3}, COMPACT, '"a\tb"', False),
        (RequestKind.JSON_SCHEMA, {"type": "string", "maxLength": 3}, COMPACT, '"abcd"', False),
        (RequestKind.JSON_OBJECT, None, COMPACT, '{"k":[1,2]}', True),
        (RequestKind.JSON_OBJECT, None, COMPACT, "[1]", False),
        (RequestKind.REGEX, "a+b", DEFAULT, "aab", True),
        (RequestKind.REGEX, "a+b", DEFAULT, "b", False),
        (RequestKind.CHOICE, ["yes", "no"], DEFAULT, "no", True),
        (RequestKind.CHOICE, ["yes", "no"], DEFAULT, "maybe", False),
        (RequestKind.GRAMMAR, 'root ::= "a" b\nb ::= "b"+', DEFAULT, "abb", True),
        (RequestKind.GRAMMAR, 'start: "x" NUMBER\nNUMBER: /[0-9]+/', DEFAULT, "x12", True),
        (RequestKind.GRAMMAR, 'start: "x" NUMBER\nNUMBER: /[0-9]+/', DEFAULT, "x", False),
    ],
)
def test_each_kind_is_enforced(
    small_llguidance: LLGuidanceEngine,
    kind: RequestKind,
    source: Any,
    options: Any,
    text: str,
    matches: bool,
) -> None:
    assert _matches(small_llguidance, _spec(kind, source, options), text) is matches


@pytest.mark.parametrize(
    ("schema", "label"),
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems"),
        ({"type": "number", "not": {"type": "integer"}}, "not"),
        # Next to a pattern of its own a format stays a format (schema/rewrite.py).
        ({"type": "string", "format": "idn-email", "pattern": "@"}, "format: idn-email"),
    ],
)
def test_a_keyword_llguidance_would_not_enforce_is_refused_by_name(
    small_llguidance: LLGuidanceEngine, schema: dict[str, Any], label: str
) -> None:
    spec = _spec(RequestKind.JSON_SCHEMA, schema)
    with pytest.raises(UnenforcedKeywordError) as info:
        LLGuidanceEngine.check(spec)
    assert [finding.label for finding in info.value.findings] == [label]
    with pytest.raises(UnenforcedKeywordError):
        small_llguidance.compile(spec)


def test_under_the_warn_policy_the_schema_compiles_and_the_findings_are_returned() -> None:
    spec = _spec(RequestKind.JSON_SCHEMA, {"type": "array", "uniqueItems": True})
    findings = LLGuidanceEngine.check(spec, unenforced=UnenforcedPolicy.WARN)
    assert [finding.keyword for finding in findings] == ["uniqueItems"]


@pytest.mark.parametrize(
    ("kind", "source", "reason"),
    [
        (RequestKind.REGEX, "[^\\s\\S]", "allows no output at all"),
        (RequestKind.REGEX, "(a", "invalid regex"),
        (RequestKind.GRAMMAR, "start: undefined_rule", "grammar"),
        (RequestKind.JSON_SCHEMA, {"type": "integer", "minimum": 5, "maximum": 1}, "json_schema"),
    ],
)
def test_an_invalid_or_unsatisfiable_grammar_is_a_clear_error(
    small_llguidance: LLGuidanceEngine, kind: RequestKind, source: Any, reason: str
) -> None:
    with pytest.raises(InvalidGrammarError, match=reason):
        small_llguidance.compile(_spec(kind, source))


def test_structural_tags_are_left_to_another_engine(small_llguidance: LLGuidanceEngine) -> None:
    tag = {"structures": [{"begin": "<a>", "schema": {}, "end": "</a>"}], "triggers": ["<a>"]}
    with pytest.raises(EngineDoesNotSupport):
        small_llguidance.compile(_spec(RequestKind.STRUCTURAL_TAG, tag))


def test_a_request_stop_token_is_allowed_only_where_the_grammar_may_end(
    small_llguidance: LLGuidanceEngine,
) -> None:
    eos, eot = VOCAB.index(EOS), VOCAB.index(EOT)
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "ab"), stops={eos, eot})
    assert not _allowed(matcher, EOT)
    assert not matcher.accept_token(eot)
    assert matcher.accept_token(VOCAB.index("a")) and matcher.accept_token(VOCAB.index("b"))
    assert _allowed(matcher, EOT) and _allowed(matcher, EOS)
    assert matcher.accept_token(eot)
    assert matcher.is_terminated()


def test_a_request_that_stops_on_other_tokens_does_not_stop_on_the_tokenizers(
    small_llguidance: LLGuidanceEngine,
) -> None:
    eos, eot = VOCAB.index(EOS), VOCAB.index(EOT)
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "a"), stops={eot})
    assert matcher.accept_token(VOCAB.index("a"))
    assert _allowed(matcher, EOT) and not _allowed(matcher, EOS)
    assert not matcher.accept_token(eos)


def test_rollback_returns_to_an_earlier_position(small_llguidance: LLGuidanceEngine) -> None:
    eot = VOCAB.index(EOT)
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "ab|ac"), stops={eot})
    for token in _ids("ab"):
        assert matcher.accept_token(token)
    assert matcher.accept_token(eot) and matcher.is_terminated()
    matcher.rollback(2)
    assert not matcher.is_terminated()
    assert matcher.accept_token(VOCAB.index("c"))


def test_a_batch_fill_writes_what_row_by_row_fills_write(
    small_llguidance: LLGuidanceEngine,
) -> None:
    specs = [_spec(RequestKind.REGEX, "a+"), _spec(RequestKind.JSON_SCHEMA, OBJECT)]
    matchers = [_matcher(small_llguidance, spec) for spec in specs]
    matchers[0].accept_token(VOCAB.index("a"))
    width = (len(VOCAB) + 31) // 32
    one_by_one = torch.zeros((3, width), dtype=torch.int32)
    for row, matcher in zip((0, 2), matchers, strict=True):
        matcher.fill_bitmask(one_by_one, row)
    batched = torch.zeros((3, width), dtype=torch.int32)
    LLGuidanceMatcher.fill_batch(matchers, batched, [0, 2], threads=2)
    assert torch.equal(batched, one_by_one)
    assert batched[0].any() and batched[2].any() and not batched[1].any()


def test_a_serialised_grammar_loads_back_and_garbage_does_not(
    small_llguidance: LLGuidanceEngine,
) -> None:
    compiled = small_llguidance.compile(_spec(RequestKind.JSON_SCHEMA, OBJECT))
    loaded = small_llguidance.deserialize(small_llguidance.serialize(compiled))
    matcher = small_llguidance.new_matcher(loaded, stop_token_ids=None, max_rollback_tokens=0)
    assert all(matcher.accept_token(token) for token in _ids('{"a":1}'))
    with pytest.raises(ValueError):
        small_llguidance.deserialize(b"\xff\xfe")
    with pytest.raises(ValueError):
        small_llguidance.deserialize(b'{"grammars": 7}')


def test_the_fingerprint_names_the_policy_and_the_vocabulary(
    small_llguidance: LLGuidanceEngine,
) -> None:
    tokenizer = small_llguidance._tokenizer
    warn = LLGuidanceEngine(tokenizer, unenforced=UnenforcedPolicy.WARN)
    assert warn.fingerprint != small_llguidance.fingerprint
    assert LLGuidanceEngine(tokenizer).fingerprint == small_llguidance.fingerprint


def test_a_complete_output_is_terminated_only_by_its_stop_token(
    small_llguidance: LLGuidanceEngine,
) -> None:
    # vLLM stops masking a terminated grammar: terminating as soon as
    # nothing but the stop token may follow would let the model run on.
    matcher = _matcher(small_llguidance, _spec(RequestKind.CHOICE, ["yes"]))
    assert matcher.accept_token(VOCAB.index("yes"))
    assert not matcher.is_terminated()
    assert _allowed(matcher, EOS) and not _allowed(matcher, "y")
    assert matcher.accept_token(VOCAB.index(EOS)) and matcher.is_terminated()
    assert not matcher.accept_token(VOCAB.index("y"))


@pytest.mark.parametrize(
    ("schema", "text", "accepted"),
    [
        # objects and tuples are closed, as xgrammar closes them
        (OBJECT, '{"a":1,"b":2}', False),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, "[1,2]", False),
        ({"type": "array", "prefixItems": [{"type": "integer"}]}, "[1]", True),
        # unless the schema opens them itself
        ({**OBJECT, "additionalProperties": True}, '{"a":1,"b":2}', True),
        ({"type": "object"}, '{"z":[1]}', True),
        # nested objects too
        ({"type": "array", "items": OBJECT}, '[{"a":1,"b":2}]', False),
        # a required name the object does not list is listed as any value, and no other
        ({**OBJECT, "required": ["a", "b"]}, '{"a":1,"b":[2]}', True),
        ({**OBJECT, "required": ["a", "b"]}, '{"a":1,"b":2,"c":3}', False),
        # an allOf's members stay open, or the properties one adds would be forbidden
        (
            {"allOf": [OBJECT, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
            '{"a":1,"b":2}',
            True,
        ),
        # a name a oneOf branch lists or requires is listed too, and no other
        (KIND_BRANCH, '{"a":1,"kind":"k"}', True),
        (KIND_BRANCH, '{"a":1}', False),
        (KIND_BRANCH, '{"a":1,"kind":"k","c":3}', False),
    ],
)
def test_json_objects_are_closed_where_xgrammar_closes_them(
    small_llguidance: LLGuidanceEngine, schema: dict[str, Any], text: str, accepted: bool
) -> None:
    assert _matches(small_llguidance, _spec(RequestKind.JSON_SCHEMA, schema), text) is accepted


def test_a_value_two_one_of_branches_accept_is_never_accepted(
    small_llguidance: LLGuidanceEngine,
) -> None:
    # {"b":2} is valid for both branches, so not for the oneOf. Closing the
    # first branch over "a" would have made llguidance prove the branches
    # exclusive, and accept it through the second.
    schema = {
        "type": "object",
        "oneOf": [
            {"properties": {"a": {"type": "integer"}}},
            {"properties": {"b": {"type": "integer"}}, "required": ["b"]},
        ],
    }
    spec = _spec(RequestKind.JSON_SCHEMA, schema)
    with pytest.raises(InvalidGrammarError, match="oneOf"):
        small_llguidance.compile(spec)


def test_a_format_llguidance_writes_loosely_is_refused_where_it_is(
    small_llguidance: LLGuidanceEngine,
) -> None:
    # Next to a pattern of its own a format stays a format (schema/rewrite.py); alone,
    # hostname is rewritten as an exact pattern (schema/formats.py).
    host = {"type": "string", "format": "hostname", "pattern": "^[a-z.]+$"}
    schema = {"type": "object", "properties": {"host": host}}
    spec = _spec(RequestKind.JSON_SCHEMA, schema)
    with pytest.raises(
        UnenforcedKeywordError, match="'format: hostname' at /properties/host/format"
    ):
        small_llguidance.compile(spec)
    findings = LLGuidanceEngine.check(spec, unenforced=UnenforcedPolicy.WARN)
    assert [finding.label for finding in findings] == ["format: hostname"]


def test_a_refused_token_leaves_the_matcher_where_it_was(
    small_llguidance: LLGuidanceEngine,
) -> None:
    # vLLM checks speculative draft tokens one by one; a wrong draft must
    # not end the request.
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "ab"))
    assert not matcher.accept_token(VOCAB.index("b"))
    assert matcher.accept_token(VOCAB.index("a"))
    assert matcher.accept_token(VOCAB.index("b"))
    assert matcher.accept_token(VOCAB.index(EOS)) and matcher.is_terminated()


def test_a_pattern_whose_whitespace_class_llguidance_reads_narrower_is_refused() -> None:
    # ECMA-262's \s includes U+FEFF, Rust's (llguidance's) does not: \S would
    # let it through. Written out where it can be (schema/ecma_whitespace.py);
    # inside a class it cannot.
    spec = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": "^[a\\S]$"})
    with pytest.raises(UnenforcedKeywordError, match="'pattern' at /pattern"):
        LLGuidanceEngine.check(spec)
    written = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": "^\\S$"})
    assert LLGuidanceEngine.check(written) == ()
    plain = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": "^[a-z]+$"})
    assert LLGuidanceEngine.check(plain) == ()


def _first_step_ends(
    engine: LLGuidanceEngine, spec: GrammarSpec, token: int
) -> tuple[str, FailureClass]:
    """Why a guarded request of ``spec`` ends at its first step, sampling ``token``."""
    compiled = engine.compile(spec)
    matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    ended: list[tuple[str, FailureClass]] = []
    guard = GuardedMatcher(
        matcher,
        spec.describe(),
        end_request=lambda request_id, why, failure: ended.append((why, failure)),
        report_fault=lambda label, fault: None,
    )
    guard.fill_bitmask(torch.zeros((1, (len(VOCAB) + 31) // 32), dtype=torch.int32), 0)
    assert guard.accept_tokens("req", [token]) is False
    ((why, failure),) = ended
    return why, failure


def test_a_grammar_past_llguidances_lexer_limit_ends_its_request_as_the_clients_error(
    small_llguidance: LLGuidanceEngine,
) -> None:
    """``a{99999999}`` compiles, then a request's matcher hits llguidance's lexer limit.

    llguidance then allows only the stop token and refuses it: a dead end that
    once ended the request as a server error ("the grammar rejected sampled
    token"). The matcher says why instead, and the guard makes it the client's.
    """
    spec = _spec(RequestKind.REGEX, "a{99999999}")
    why, failure = _first_step_ends(small_llguidance, spec, VOCAB.index(EOS))
    assert failure is FailureClass.INVALID
    assert "grew past llguidance's limits while decoding: lexer error" in why
    assert "<state>" not in why  # the cause, not llguidance's state dump


def test_a_token_past_llguidances_parser_limit_ends_its_request_as_the_clients_error(
    small_llguidance: LLGuidanceEngine,
) -> None:
    """Two rules of 1,500 alternatives each: no alternation is past the row limit, their sum is.

    The first mask allows "w"; taking it goes past the row limit, and the
    matcher refuses the very token it allowed: once a server error (a 500,
    "the grammar rejected sampled token"), now the client's, with the cause.
    """
    grammar = "start: a | b\n" + "\n".join(
        f"{rule}: " + " | ".join(f'"{prefix}{number}"' for number in range(1500))
        for rule, prefix in (("a", "w"), ("b", "v"))
    )
    spec = _spec(RequestKind.GRAMMAR, grammar)
    why, failure = _first_step_ends(small_llguidance, spec, VOCAB.index("w"))
    assert failure is FailureClass.INVALID
    assert "grew past llguidance's limits while decoding" in why and "max is" in why


def _alternatives(count: int) -> str:
    return "start: " + " | ".join(f'"w{number}"' for number in range(count))


def test_an_alternation_wider_than_a_parser_row_is_refused_before_its_compile(
    small_llguidance: LLGuidanceEngine,
) -> None:
    """2,000 alternatives in one rule fail at the first token; 1,999 are served.

    Refused at the check, a request gets its 400 from the API server at once,
    not after a compile that a large grammar makes seconds long.
    """
    with pytest.raises(PastEngineLimitsError, match="alternation of 2,000 items"):
        LLGuidanceEngine.check(_spec(RequestKind.GRAMMAR, _alternatives(2000)))
    assert _matches(small_llguidance, _spec(RequestKind.GRAMMAR, _alternatives(1999)), "w17")
    # The limit is llguidance's own: its matcher, given the refused grammar, fails at "w".
    matcher = llguidance.LLMatcher(
        small_llguidance_tokenizer(), llguidance.grammar_from("lark", _alternatives(2000))
    )
    assert not matcher.is_error()
    assert not matcher.consume_token(VOCAB.index("w"))
    assert "max is 2000" in matcher.get_error()


def test_a_choice_wider_than_a_parser_row_is_served_string_by_string() -> None:
    """A choice's strings are one lexer terminal, not one rule's alternatives.

    In a rule, llguidance's parser fails past 1,999 of them at the first
    token (above) and checks them in time that grows with the square of
    their number; as a terminal 5,000 are served, each string whole and
    nothing else, an empty one, prefixes and escapes included.
    """
    specials = ["", 'quote " and \\', "line\nbreak", "é"]
    compiled = byte_llguidance().compile(
        _spec(RequestKind.CHOICE, [f"w{number}" for number in range(5000)] + specials)
    )
    for text in ["w0", "w49", "w4999", *specials]:
        assert llguidance_accepts(compiled, text), text
    for text in ["w5000", "w", "w00", "w0w1", "quote", "line", "e"]:
        assert not llguidance_accepts(compiled, text), text


def test_a_grammar_past_llguidances_limits_at_its_first_mask_says_so(
    model_tokenizer: Any,
) -> None:
    # Not "allows no output at all": the grammar is satisfiable, only too large
    # for llguidance's lexer over a full vocabulary (the small one stays under).
    engine = LLGuidanceEngine.for_hf_tokenizer(
        model_tokenizer, len(model_tokenizer), stop_token_ids=[1]
    )
    regex = "".join(f"[^{letter}]{{0,63}}" for letter in "abcdefgh")
    with pytest.raises(InvalidGrammarError, match="past llguidance's limits: lexer error"):
        engine.compile(_spec(RequestKind.REGEX, regex))


def test_a_batch_fill_past_llguidances_limits_ends_only_that_request(
    small_llguidance: LLGuidanceEngine,
) -> None:
    """The batch call fills every row; one matcher past a limit must not pass unseen.

    Its row would allow only a stop token the matcher then refuses (a 500 on a
    busy server, where rows are filled in batches). The batch raises, the rows
    are filled again one by one, and only that request ends, as the client's.
    """
    ended: list[tuple[str, FailureClass]] = []

    def guarded(regex: str) -> GuardedMatcher:
        compiled = small_llguidance.compile(_spec(RequestKind.REGEX, regex))
        return GuardedMatcher(
            small_llguidance.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0),
            regex,
            end_request=lambda request_id, why, failure: ended.append((why, failure)),
            report_fault=lambda label, fault: None,
        )

    past_limits, healthy = guarded("a{99999999}"), guarded("[a-z]+")
    expected = torch.zeros((1, (len(VOCAB) + 31) // 32), dtype=torch.int32)
    guarded("[a-z]+").fill_bitmask(expected, 0)
    bitmask = torch.zeros((2, expected.shape[1]), dtype=torch.int32)
    rows = [RowFill(past_limits, 0), RowFill(healthy, 1)]
    matchers = [fill.target.batch_matcher() for fill in rows]
    bitmask_fill._fill_batch(bitmask, rows, matchers, threads=1)  # type: ignore[arg-type]
    assert torch.equal(bitmask[1], expected[0])
    assert past_limits.fault is not None and (bitmask[0] == -1).all()  # seen at the fill
    assert past_limits.accept_tokens("req", [VOCAB.index("a")]) is False
    ((why, failure),) = ended
    assert failure is FailureClass.INVALID and "past llguidance's limits" in why


@pytest.mark.parametrize(
    "bitmask",
    [
        torch.zeros((2, 8), dtype=torch.int64),
        torch.zeros((2, 16), dtype=torch.int32)[:, ::2],
        torch.zeros(8, dtype=torch.int32),
    ],
    ids=["64-bit words", "rows not back to back", "one dimension"],
)
def test_a_bitmask_llguidance_cannot_write_through_a_pointer_is_refused(
    small_llguidance: LLGuidanceEngine, bitmask: torch.Tensor
) -> None:
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "a+"))
    before = bitmask.clone()
    with pytest.raises(ValueError, match="contiguous 2-D int32"):
        matcher.fill_bitmask(bitmask, 1)
    with pytest.raises(ValueError, match="contiguous 2-D int32"):
        LLGuidanceMatcher.fill_batch([matcher], bitmask, [1], threads=1)
    assert torch.equal(bitmask, before)


def test_a_row_past_the_bitmask_is_refused_before_anything_is_written(
    small_llguidance: LLGuidanceEngine,
) -> None:
    matcher = _matcher(small_llguidance, _spec(RequestKind.REGEX, "a+"))
    bitmask = torch.zeros((1, (len(VOCAB) + 31) // 32), dtype=torch.int32)
    with pytest.raises(IndexError):
        matcher.fill_bitmask(bitmask, 1)
    with pytest.raises(IndexError):
        LLGuidanceMatcher.fill_batch([matcher], bitmask, [1], threads=1)
    assert not bitmask.any()


def test_the_engine_module_imports_neither_torch_nor_its_compiler() -> None:
    """A compile worker imports it at its start: llguidance.torch would add a second of CPU.

    That module builds a ``torch.compile`` kernel when imported, which
    imports TorchDynamo and Inductor; the engine writes masks without it.
    """
    probe = (
        "import sys, grammar_guard.core.engines.llguidance.engine; "
        "names = ('torch', 'torch._dynamo', 'llguidance.torch'); "
        "print(sorted(name for name in names if name in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


def test_a_negated_class_that_names_a_quote_or_backslash_is_refused() -> None:
    # llguidance 1.7.6 writes the JSON escapes of a quote and a backslash
    # whatever a negated class says: "[^\\]" lets a backslash through. Once
    # this calibration fails, llguidance keeps them out and the finding can go.
    lenient = LLGuidanceEngine(
        llguidance.LLTokenizer(ByteVocabulary()), unenforced=UnenforcedPolicy.WARN
    )
    for pattern, text in [("^[^\\\\]$", '"\\\\"'), ('^[^a"]$', '"\\""'), ("^[^!-~]$", '"\\\\"')]:
        spec = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": pattern})
        assert llguidance_accepts(lenient.compile(spec), text), pattern
        with pytest.raises(UnenforcedKeywordError, match="'pattern' at /pattern"):
            LLGuidanceEngine.check(spec)
    # Classes that leave both in, or keep them out through an escape, are read right.
    for pattern in ("^[^a-z]$", "^[^\\W]$", "^[^/~]*$"):
        assert LLGuidanceEngine.check(_spec(RequestKind.JSON_SCHEMA, {"pattern": pattern})) == ()


def test_a_pattern_matching_every_control_character_without_the_escapes_is_refused() -> None:
    # llguidance 1.7.6 lets a quote and a backslash through where a pattern
    # takes all of U+0000-U+001F but not them, as if it took every escape;
    # one control character fewer and it does not. Once this calibration
    # fails, llguidance keeps them out and the finding can go.
    lenient = LLGuidanceEngine(
        llguidance.LLTokenizer(ByteVocabulary()), unenforced=UnenforcedPolicy.WARN
    )
    leaking = [
        ("^[\\u0000-\\u001f]$", '"\\""'),
        ("^a[\\u0000-\\u001fb]*$", '"a\\\\"'),
        ("^(?:[\\u0000-\\u000f]|[\\u0010-\\u001f])$", '"\\""'),
        ("[\\x00-\\x1F]", '"\\""'),
    ]
    for pattern, text in leaking:
        spec = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": pattern})
        assert llguidance_accepts(lenient.compile(spec), text), pattern
        with pytest.raises(UnenforcedKeywordError, match="'pattern' at /pattern"):
            LLGuidanceEngine.check(spec)
    # One control character short, or with the quote and the backslash taken
    # as well (".", a negated class), nothing leaks, and the pattern is served.
    for pattern, text in [("^[\\u0001-\\u001f]$", '"\\""'), ("^[\\u0000-\\u001e]$", '"\\\\"')]:
        spec = _spec(RequestKind.JSON_SCHEMA, {"type": "string", "pattern": pattern})
        assert LLGuidanceEngine.check(spec) == ()
        assert not llguidance_accepts(lenient.compile(spec), text), pattern
    for pattern in ("^(?:.|\\s)*$", "^[^a]*$", "^[\\u0000-\\uffff]*$", "^[\\w\\s]*$"):
        assert LLGuidanceEngine.check(_spec(RequestKind.JSON_SCHEMA, {"pattern": pattern})) == ()


@pytest.mark.parametrize(
    ("schema", "text"),
    [
        ({"$schema": "http://json-schema.org/draft-04/schema#", "const": 1}, "2"),
        (
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "type": "array",
                "prefixItems": [{"const": 1}],
                "items": True,
            },
            "[2]",
        ),
        (
            {
                "type": "object",
                "properties": {
                    "a": {"$schema": "http://json-schema.org/draft-04/schema#", "const": 1}
                },
            },
            '{"a":2}',
        ),
    ],
)
def test_a_schema_is_read_as_2020_12_whatever_its_schema_says(
    schema: dict[str, Any], text: str
) -> None:
    # llguidance reads "$schema" and drops what that draft lacks: const under
    # draft-04, prefixItems under draft-07. grammar-guard reads 2020-12 throughout.
    engine = LLGuidanceEngine(llguidance.LLTokenizer(ByteVocabulary()))
    assert not llguidance_accepts(engine.compile(_spec(RequestKind.JSON_SCHEMA, schema)), text)
    assert llguidance_accepts(
        engine.compile(_spec(RequestKind.JSON_SCHEMA, {**schema, "title": "check"})),
        text.replace("2", "1"),
    )


@pytest.mark.parametrize(
    ("dialect", "identifier"),
    [("http://json-schema.org/draft-04/schema#", "id"), (None, "$id")],
)
def test_an_earlier_drafts_plain_name_identifier_still_resolves(
    dialect: str | None, identifier: str
) -> None:
    point = {identifier: "#point", "type": "object", "required": ["x"]}
    schema: dict[str, Any] = {
        "definitions": {"p": {**point, "properties": {"x": {"type": "integer"}}}},
        "type": "object",
        "properties": {"a": {"$ref": "#point"}},
        "required": ["a"],
    }
    if dialect is not None:
        schema["$schema"] = dialect
    engine = LLGuidanceEngine(llguidance.LLTokenizer(ByteVocabulary()))
    compiled = engine.compile(_spec(RequestKind.JSON_SCHEMA, schema))
    assert llguidance_accepts(compiled, '{"a":{"x":1}}')
    assert not llguidance_accepts(compiled, '{"a":{"x":"1"}}')
