"""XGrammarEngine against real xgrammar, with the small tokenizer from conftest."""

from __future__ import annotations

import json
import pickle
import re
from typing import TYPE_CHECKING, Any

import pytest
import torch
import xgrammar as xgr

from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine, XGrammarMatcher
from grammar_guard.core.engines.xgrammar.rewrite import bounded_strings_as_json
from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.masks.layout import allocate_bitmask, words_per_row
from grammar_guard.core.request.grammar_text import grammar_is_lark
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.settings import UnenforcedPolicy

if TYPE_CHECKING:
    from conftest import SmallTokenizer

COMPACT = CompileOptions(any_whitespace=False)
DEFAULT = CompileOptions()

INT_SCHEMA = {"type": "integer"}
OBJECT_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
LEGACY_TAG = {
    "structures": [{"begin": "<a>", "schema": INT_SCHEMA, "end": "</a>"}],
    "triggers": ["<a"],
}
NEW_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<a>",
        "content": {"type": "json_schema", "json_schema": INT_SCHEMA},
        "end": "</a>",
    },
}
TRICKY_CHOICES = ['say "hi"', "back\\slash", "two\nlines", "yes"]

# kind, source, texts that must match completely, texts that must not
CASES: list[tuple[str, RequestKind, Any, list[str], list[str]]] = [
    (
        "json-schema",
        RequestKind.JSON_SCHEMA,
        OBJECT_SCHEMA,
        ['{"a":12}', '{ "a" : -3 }'],
        ['{"b":1}', '{"a":"x"}', '{"a":1,"b":2}'],
    ),
    ("json-object", RequestKind.JSON_OBJECT, None, ['{"x":[1,true]}', "{}"], ["[1]", '"a"']),
    ("regex", RequestKind.REGEX, "[a-c]+x", ["abx", "cx"], ["adx", "x", "ab"]),
    (
        "choice",
        RequestKind.CHOICE,
        TRICKY_CHOICES,
        TRICKY_CHOICES,
        ["say hi", 'say "hi', "back/slash", "backslash", "two lines", "ye"],
    ),
    (
        "ebnf",
        RequestKind.GRAMMAR,
        'root ::= "a" item*\nitem ::= "b" | "c"',
        ["a", "abcb"],
        ["ad", "b"],
    ),
    ("lark", RequestKind.GRAMMAR, 'start: "a" item*\nitem: "b" | "c"', ["a", "acbc"], ["ad", "c"]),
    (
        "structural-tag-legacy",
        RequestKind.STRUCTURAL_TAG,
        LEGACY_TAG,
        ["", "free text", "hi<a>12</a>", "<a>1</a>x<a>2</a>"],
        ["<a>x</a>", "<a>1</b>"],
    ),
    (
        "structural-tag",
        RequestKind.STRUCTURAL_TAG,
        NEW_TAG,
        ["<a>7</a>", "<a>-10</a>"],
        ["x<a>7</a>", "<a>7</a>x", "<a>q</a>"],
    ),
]


@pytest.mark.parametrize(
    ("kind", "source", "good", "bad"), [case[1:] for case in CASES], ids=[c[0] for c in CASES]
)
def test_every_kind_compiles_and_is_enforced(
    small: SmallTokenizer, kind: RequestKind, source: Any, good: list[str], bad: list[str]
) -> None:
    spec = small.spec(kind, source)
    XGrammarEngine.check(spec)  # the API-process check needs no tokenizer
    compiled = small.engine.compile(spec)
    assert compiled.memory_bytes > 0
    for text in good:
        assert small.matches(spec, text), f"{text!r} should match"
    for text in bad:
        assert not small.matches(spec, text), f"{text!r} should not match"


def test_vocab_size(small: SmallTokenizer) -> None:
    assert small.engine.vocab_size == len(small.vocab)


# --- EBNF or Lark -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lark"),
    [
        ('root ::= "a"', False),
        ('start: "a"', True),
        ('root ::= "a" | b\nb ::= "c"', False),
        ('# root ::= "a" is what EBNF would say\nstart: "a"', True),
        ('// root ::= "a"\nstart: "a"', True),
        ('start: "a"  // not root ::= "a"', True),
        ('# header comment\nroot ::= "a"  # trailing', False),
        ('root ::= "#"', False),
    ],
)
def test_grammar_is_lark(text: str, lark: bool) -> None:
    assert grammar_is_lark(text) is lark


def test_lark_grammar_with_commented_ebnf_compiles(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.GRAMMAR, '// root ::= "b"\nstart: "a"')
    assert small.matches(spec, "a")
    assert not small.matches(spec, "b")


def test_ebnf_separator_inside_a_lark_string_literal(small: SmallTokenizer) -> None:
    # Valid Lark for a language that itself uses "::=" (BNF, Pascal-like assignments).
    text = 'start: "x" " ::= " "y"'
    assert grammar_is_lark(text)
    small.engine.check(small.spec(RequestKind.GRAMMAR, text))


# --- errors -----------------------------------------------------------------------

NATIVE_PREFIX = re.compile(r"\[\d\d:\d\d:\d\d\]|/project/|\.cc:\d+")


@pytest.mark.parametrize(
    ("kind", "source", "expected"),
    [
        (RequestKind.JSON_SCHEMA, '{"type": "foo"}', 'Unsupported type "foo"'),
        (RequestKind.JSON_SCHEMA, {"properties": {"a": {"$ref": "#/nope"}}}, "nope"),
        (RequestKind.REGEX, "[a-", "Unclosed '['"),
        (RequestKind.REGEX, "(ab", "position"),
        (RequestKind.GRAMMAR, 'root ::= "a', "string literal"),
        (RequestKind.GRAMMAR, "root ::= missing", 'Rule "missing" is not defined'),
        (RequestKind.GRAMMAR, 'start: "a', "unterminated string literal"),
        (
            RequestKind.STRUCTURAL_TAG,
            {"type": "structural_tag", "format": {"type": "bogus"}},
            "bogus",
        ),
        (
            RequestKind.STRUCTURAL_TAG,
            {"structures": [{"begin": "<a>"}], "triggers": ["<a"]},
            "schema",
        ),
        (RequestKind.STRUCTURAL_TAG, {"structures": []}, "triggers"),
    ],
)
def test_invalid_grammars_give_a_clean_reason(
    small: SmallTokenizer, kind: RequestKind, source: Any, expected: str
) -> None:
    spec = small.spec(kind, source)
    reasons = []
    for step in (XGrammarEngine.check, small.engine.compile):
        with pytest.raises(InvalidGrammarError) as info:
            step(spec)
        reasons.append(info.value.reason)
    check_reason, compile_reason = reasons
    assert check_reason == compile_reason  # one parse step for both
    assert expected in check_reason
    assert kind.value in check_reason
    assert not NATIVE_PREFIX.search(check_reason), check_reason
    assert "\n" not in check_reason


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.REGEX, "[^\\s\\S]"),
        (RequestKind.JSON_SCHEMA, {"$ref": "#"}),
        (RequestKind.GRAMMAR, 'root ::= root "a"'),
        (RequestKind.GRAMMAR, 'root ::= "\u00e9"'),  # not in the vocabulary
    ],
)
def test_a_grammar_that_allows_no_first_token_is_refused_at_compile(
    small: SmallTokenizer, kind: RequestKind, source: Any
) -> None:
    # These parse, so the API process lets them through; without the check the
    # engine would sample a token the grammar rejects and fail the request as
    # a server error instead of telling the client.
    spec = small.spec(kind, source)
    XGrammarEngine.check(spec)
    with pytest.raises(InvalidGrammarError, match="allows no output at all"):
        small.engine.compile(spec)


@pytest.mark.parametrize(
    ("kind", "source"), [(RequestKind.REGEX, ""), (RequestKind.GRAMMAR, 'root ::= ""')]
)
def test_a_grammar_of_only_the_empty_output_still_compiles(
    small: SmallTokenizer, kind: RequestKind, source: Any
) -> None:
    assert small.matches(small.spec(kind, source), "")


# --- whitespace modes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "source"), [(RequestKind.JSON_SCHEMA, OBJECT_SCHEMA), (RequestKind.JSON_OBJECT, None)]
)
def test_compact_mode_refuses_whitespace(
    small: SmallTokenizer, kind: RequestKind, source: Any
) -> None:
    compact = small.spec(kind, source, COMPACT)
    default = small.spec(kind, source, DEFAULT)
    assert small.matches(compact, '{"a":1}')
    assert not small.matches(compact, '{"a": 1}')
    assert not small.matches(compact, '{"a":1 }')
    assert not small.matches(compact, '{\n"a":1}')
    assert small.matches(default, '{"a":1}')
    assert small.matches(default, '{"a": 1}')
    assert small.matches(default, '{\n  "a" : 1\n}')


def test_compact_mode_rejects_the_space_token_itself(small: SmallTokenizer) -> None:
    matcher = small.matcher(small.spec(RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, COMPACT))
    assert small.accepts_all(matcher, small.ids('{"a":'))
    assert not matcher.accept_token(small.id(" "))
    assert matcher.accept_token(small.id("1"))


# --- matcher ----------------------------------------------------------------------------


def test_rollback_restores_state(small: SmallTokenizer) -> None:
    matcher = small.matcher(small.spec(RequestKind.REGEX, "ab|cd"))
    assert matcher.accept_token(small.id("a"))
    assert not matcher.accept_token(small.id("c"))
    matcher.rollback(1)
    assert matcher.accept_token(small.id("c"))  # back at the start
    assert matcher.accept_token(small.id("d"))
    assert matcher.accept_token(small.eos)
    assert matcher.is_terminated()
    matcher.rollback(1)
    assert not matcher.is_terminated()
    matcher.rollback(2)
    assert matcher.accept_token(small.id("a"))
    assert matcher.accept_token(small.id("b"))


def test_reset_returns_to_the_start(small: SmallTokenizer) -> None:
    matcher = small.matcher(small.spec(RequestKind.REGEX, "ab"))
    assert small.accepts_all(matcher, [*small.ids("ab"), small.eos])
    assert matcher.is_terminated()
    matcher.reset()
    assert not matcher.is_terminated()
    assert not matcher.accept_token(small.id("b"))
    assert matcher.accept_token(small.id("a"))


def allowed_by_bitmask(row: torch.Tensor, vocab_size: int) -> set[int]:
    words = row.tolist()
    return {t for t in range(vocab_size) if (words[t // 32] >> (t % 32)) & 1}


def allowed_by_matcher(matcher: XGrammarMatcher, vocab_size: int) -> set[int]:
    allowed = set()
    for token in range(vocab_size):
        if matcher.accept_token(token):
            allowed.add(token)
            matcher.rollback(1)
    return allowed


@pytest.mark.parametrize(
    ("kind", "source", "options", "prefix"),
    [
        (RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, DEFAULT, ""),
        (RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, DEFAULT, '{"a":'),
        (RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, COMPACT, '{"a":'),
        (RequestKind.JSON_SCHEMA, OBJECT_SCHEMA, DEFAULT, '{"a":1'),
        (RequestKind.REGEX, "[a-c]+x?", DEFAULT, "ab"),
        (RequestKind.CHOICE, TRICKY_CHOICES, DEFAULT, "two"),
        (RequestKind.CHOICE, TRICKY_CHOICES, DEFAULT, "back"),
    ],
)
def test_fill_bitmask_sets_exactly_the_allowed_tokens(
    small: SmallTokenizer, kind: RequestKind, source: Any, options: CompileOptions, prefix: str
) -> None:
    vocab_size = small.engine.vocab_size
    matcher = small.matcher(small.spec(kind, source, options))
    assert small.accepts_all(matcher, small.ids(prefix))
    bitmask = allocate_bitmask(3, vocab_size)
    assert bitmask.dtype == torch.int32
    assert bitmask.shape == (3, words_per_row(vocab_size))
    bitmask[1].zero_()
    matcher.fill_bitmask(bitmask, 1)
    expected = allowed_by_matcher(matcher, vocab_size)
    assert 0 < len(expected) < vocab_size  # the check below means something
    assert allowed_by_bitmask(bitmask[1], vocab_size) == expected
    # Other rows are untouched (still all allowed).
    assert bool((bitmask[0] == -1).all()) and bool((bitmask[2] == -1).all())


def test_bitmask_allows_stop_token_only_when_complete(small: SmallTokenizer) -> None:
    vocab_size = small.engine.vocab_size
    matcher = small.matcher(small.spec(RequestKind.REGEX, "ab"))
    bitmask = allocate_bitmask(1, vocab_size)
    matcher.fill_bitmask(bitmask, 0)
    assert allowed_by_bitmask(bitmask[0], vocab_size) == {small.id("a")}
    assert small.accepts_all(matcher, small.ids("ab"))
    matcher.fill_bitmask(bitmask, 0)
    assert allowed_by_bitmask(bitmask[0], vocab_size) == {small.eos}


def test_custom_stop_token_terminates(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.REGEX, "yes|no")

    default = small.matcher(spec)
    assert default.accept_token(small.id("yes"))
    assert not default.accept_token(small.eot)
    assert default.accept_token(small.eos)
    assert default.is_terminated()

    custom = small.matcher(spec, stop_token_ids=[small.eot])
    assert custom.accept_token(small.id("no"))
    assert not custom.is_terminated()
    assert not custom.accept_token(small.eos)
    bitmask = allocate_bitmask(1, small.engine.vocab_size)
    custom.fill_bitmask(bitmask, 0)
    assert allowed_by_bitmask(bitmask[0], small.engine.vocab_size) == {small.eot}
    assert custom.accept_token(small.eot)
    assert custom.is_terminated()


def test_empty_stop_token_override_keeps_the_tokenizer_stop(small: SmallTokenizer) -> None:
    matcher = small.matcher(small.spec(RequestKind.REGEX, "yes"), stop_token_ids=set())
    assert matcher.accept_token(small.id("yes"))
    assert matcher.accept_token(small.eos)
    assert matcher.is_terminated()


# --- special tokens ----------------------------------------------------------------


@pytest.fixture(scope="module")
def with_special(small: SmallTokenizer) -> XGrammarEngine:
    """The small vocabulary with ``<eot>`` and the stop token as its special tokens."""
    info = small.engine._tokenizer_info
    return XGrammarEngine(info, compile_threads=1, special_token_ids=[small.eot, small.eos])


def _next(engine: XGrammarEngine, small: SmallTokenizer, spec: GrammarSpec, text: str) -> set[int]:
    matcher = engine.new_matcher(engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    assert small.accepts_all(matcher, small.ids(text))
    bitmask = allocate_bitmask(1, engine.vocab_size)
    matcher.fill_bitmask(bitmask, 0)
    return allowed_by_bitmask(bitmask[0], engine.vocab_size)


def test_a_special_token_is_never_grammar_text(
    small: SmallTokenizer, with_special: XGrammarEngine
) -> None:
    spec = small.spec(RequestKind.REGEX, "[a-z<>]*")
    # The conftest engine names no special tokens: there <eot> is text like any other.
    assert small.eot in _next(small.engine, small, spec, "a")
    allowed = _next(with_special, small, spec, "a")
    assert small.eot not in allowed
    assert {small.id("<"), small.eos} <= allowed  # its text can be written; the output may end
    assert with_special.vocab_size == small.engine.vocab_size


def test_a_grammar_gets_the_special_tokens_it_names(
    small: SmallTokenizer, with_special: XGrammarEngine
) -> None:
    by_id = small.spec(RequestKind.GRAMMAR, f"root ::= [a-z]+ Token({small.eot})")
    assert small.eot in _next(with_special, small, by_id, "ab")

    def tag(content: dict[str, Any], end: str) -> GrammarSpec:
        tag_format = {"type": "tag", "begin": "x", "content": content, "end": end}
        spec = {"type": "structural_tag", "format": tag_format}
        return small.spec(RequestKind.STRUCTURAL_TAG, spec)

    written = tag({"type": "const_string", "value": "y"}, small.vocab[small.eot])
    assert _next(with_special, small, written, "xy") == {small.id("<"), small.eot}
    # Free text in a tag that does not write it out: its text, never the token.
    free = _next(with_special, small, tag({"type": "any_text"}, "z"), "x")
    assert small.id("<") in free and small.eot not in free


def test_the_special_tokens_travel_with_the_recipe_and_the_stored_grammar(
    small: SmallTokenizer, with_special: XGrammarEngine
) -> None:
    rebuilt = pickle.loads(pickle.dumps(with_special.recipe())).build()
    assert rebuilt.fingerprint == with_special.fingerprint != small.engine.fingerprint
    assert rebuilt.special_token_ids == {small.eot, small.eos}
    named = small.spec(RequestKind.GRAMMAR, f"root ::= [a-z]+ Token({small.eot})")
    blob = rebuilt.serialize(rebuilt.compile(named))
    loaded = with_special.deserialize(blob)
    matcher = with_special.new_matcher(loaded, stop_token_ids=None, max_rollback_tokens=0)
    assert small.accepts_all(matcher, [*small.ids("ab"), small.eot, small.eos])
    # Its vocabulary lets back in a token this engine has no reason to know as special.
    with pytest.raises(ValueError, match="not a compiled grammar for this engine"):
        small.engine.deserialize(blob)


def test_compiled_grammars_are_independent_of_each_other(small: SmallTokenizer) -> None:
    # Two matchers on one compiled grammar do not share state.
    compiled = small.engine.compile(small.spec(RequestKind.REGEX, "ab"))
    one = small.engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    two = small.engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    assert one.accept_token(small.id("a"))
    assert not two.accept_token(small.id("b"))
    assert two.accept_token(small.id("a"))


def test_spec_is_a_usable_dict_key_for_compiled_grammars(small: SmallTokenizer) -> None:
    first = GrammarSpec.build(RequestKind.JSON_SCHEMA, '{"type": "integer"}', DEFAULT)
    second = GrammarSpec.build(RequestKind.JSON_SCHEMA, {"type": "integer"}, DEFAULT)
    store = {first: small.engine.compile(first)}
    assert second in store


# --- compact JSON inside structural tags --------------------------------------


def _tag(max_whitespace: object = "unset") -> dict[str, Any]:
    content: dict[str, Any] = {
        "type": "json_schema",
        "json_schema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
        },
    }
    if max_whitespace != "unset":
        content["max_whitespace_cnt"] = max_whitespace  # vLLM sends an explicit null
    return {
        "type": "structural_tag",
        "format": {"type": "tag", "begin": "<", "content": content, "end": ">"},
    }


@pytest.mark.parametrize("max_whitespace", ["unset", None])
def test_compact_mode_bounds_whitespace_inside_structural_tags(
    small: SmallTokenizer, max_whitespace: object
) -> None:
    padded = '<{\n\n\n"a":1}>'
    compact = small.spec(RequestKind.STRUCTURAL_TAG, _tag(max_whitespace), COMPACT)
    default = small.spec(RequestKind.STRUCTURAL_TAG, _tag(max_whitespace), DEFAULT)
    assert small.matches(compact, '<{"a":1}>')
    assert not small.matches(compact, padded)
    assert small.matches(default, padded)


def test_compact_mode_keeps_a_whitespace_bound_the_client_chose(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.STRUCTURAL_TAG, _tag(3), COMPACT)
    assert small.matches(spec, '<{\n\n\n"a":1}>')
    assert not small.matches(spec, '<{\n\n\n\n"a":1}>')


def test_legacy_structural_tag_means_free_text_with_triggered_tags(small: SmallTokenizer) -> None:
    legacy = {
        "structures": [{"begin": "<f>", "schema": {"enum": ["yes", "no"]}, "end": "</f>"}],
        "triggers": ["<f"],
    }
    spec = small.spec(RequestKind.STRUCTURAL_TAG, legacy, COMPACT)
    assert small.matches(spec, 'hi <f>"yes"</f> bye')
    assert not small.matches(spec, 'hi <f>"maybe"</f>')


def test_legacy_structural_tag_missing_fields_is_refused(small: SmallTokenizer) -> None:
    spec = small.spec(
        RequestKind.STRUCTURAL_TAG, {"structures": [{"begin": "<f>"}], "triggers": []}
    )
    with pytest.raises(InvalidGrammarError, match="'schema'"):
        small.engine.check(spec)


# --- keywords xgrammar would not enforce -------------------------------------------------

UNENFORCED_SCHEMA = {
    "type": "object",
    "properties": {
        # Written as a pattern and a maxLength (schema/formats.py), which xgrammar
        # does not enforce beside a pattern: a finding on the format the client wrote.
        "host": {"type": "string", "format": "idn-hostname"},
        "n": {"type": "number", "not": {"type": "integer"}},
    },
    "required": ["host", "n"],
}


def test_check_refuses_unenforced_keywords_naming_each(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, UNENFORCED_SCHEMA, COMPACT)
    with pytest.raises(UnenforcedKeywordError) as refused:
        XGrammarEngine.check(spec)
    assert [(f.keyword, f.pointer) for f in refused.value.findings] == [
        ("format", "/properties/host/format"),
        ("not", "/properties/n/not"),
    ]
    assert refused.value.reason == (
        "json_schema uses keywords grammar-guard cannot enforce: 'format: idn-hostname' at "
        "/properties/host/format, 'not' at /properties/n/not; set "
        "GRAMMAR_GUARD_UNENFORCED=warn to accept them unenforced"
    )
    assert isinstance(refused.value, InvalidGrammarError)  # a 400, like any invalid grammar
    with pytest.raises(UnenforcedKeywordError):
        small.engine.compile(spec)  # the engine's compile applies the same analysis


def test_warn_mode_returns_the_findings_and_compiles(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, UNENFORCED_SCHEMA, COMPACT)
    found = XGrammarEngine.check(spec, unenforced=UnenforcedPolicy.WARN)
    assert [f.label for f in found] == ["format: idn-hostname", "not"]
    engine = XGrammarEngine(small.engine._tokenizer_info, compile_threads=1,
                            unenforced=UnenforcedPolicy.WARN)  # fmt: skip
    matcher = engine.new_matcher(engine.compile(spec), stop_token_ids=None, max_rollback_tokens=0)
    # What xgrammar does enforce still holds: the required integer.
    assert not small.accepts_all(matcher, small.ids('{"host":"a","n":"x"'))


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (RequestKind.JSON_SCHEMA, OBJECT_SCHEMA),
        (RequestKind.JSON_OBJECT, None),
        (RequestKind.REGEX, "a+x"),  # not a schema: the analysis is for JSON schemas
        (RequestKind.STRUCTURAL_TAG, NEW_TAG),
    ],
)
def test_what_xgrammar_enforces_has_no_findings(
    small: SmallTokenizer, kind: RequestKind, source: Any
) -> None:
    spec = small.spec(kind, source, COMPACT)
    assert XGrammarEngine.check(spec) == ()
    assert XGrammarEngine.check(spec, unenforced=UnenforcedPolicy.WARN) == ()


def test_an_invalid_schema_is_reported_as_invalid_before_any_analysis(
    small: SmallTokenizer,
) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, {"type": "integr", "not": {}}, COMPACT)
    with pytest.raises(InvalidGrammarError, match='Unsupported type "integr"') as refused:
        XGrammarEngine.check(spec, unenforced=UnenforcedPolicy.WARN)
    assert not isinstance(refused.value, UnenforcedKeywordError)


def test_structural_tag_schemas_are_analysed(small: SmallTokenizer) -> None:
    tag = {
        "type": "structural_tag",
        "format": {
            "type": "tag",
            "begin": "<a>",
            "content": {
                "type": "json_schema",
                "json_schema": {"type": "array", "uniqueItems": True},
            },
            "end": "</a>",
        },
    }
    spec = small.spec(RequestKind.STRUCTURAL_TAG, tag, COMPACT)
    with pytest.raises(
        UnenforcedKeywordError,
        match=r"^structural_tag uses .*'uniqueItems' at /format/content/json_schema/uniqueItems;",
    ):
        small.engine.compile(spec)
    found = XGrammarEngine.check(spec, unenforced=UnenforcedPolicy.WARN)
    assert [f.pointer for f in found] == ["/format/content/json_schema/uniqueItems"]


def test_the_recipe_carries_the_policy(small: SmallTokenizer) -> None:
    engine = XGrammarEngine(small.engine._tokenizer_info, compile_threads=1,
                            unenforced=UnenforcedPolicy.WARN)  # fmt: skip
    rebuilt = engine.recipe().build()
    spec = small.spec(RequestKind.JSON_SCHEMA, UNENFORCED_SCHEMA, COMPACT)
    assert rebuilt.compile(spec).memory_bytes > 0
    with pytest.raises(UnenforcedKeywordError):
        small.engine.recipe().build().compile(spec)


def test_a_long_list_of_findings_keeps_the_reason_short_and_actionable() -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"not": {}} for i in range(60)}}
    error = UnenforcedKeywordError("json_schema", analyze(schema, XGRAMMAR))
    assert len(error.findings) == 60
    assert len(error.reason) <= 400
    assert error.reason.endswith("set GRAMMAR_GUARD_UNENFORCED=warn to accept them unenforced")
    assert re.search(r"'not' at /properties/p\d+/not and \d+ more;", error.reason)


def test_the_error_survives_pickling() -> None:
    error = UnenforcedKeywordError("json_schema", analyze({"not": {}}, XGRAMMAR))
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, UnenforcedKeywordError)
    assert copy.reason == error.reason and copy.findings == error.findings


# --- length-bounded strings stay JSON -----------------------------------------------------

# How xgrammar prints the character of a string with minLength or maxLength,
# and of a string without a bound (the JSON string character).
BOUNDED_CLASS = r"[^\"\\\r\n]"
JSON_CLASS = r"[^\0-\x1f\"\\\r\n]"
BOUNDED_NAME = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 3}, "a": {"type": "integer"}},
    "required": ["name", "a"],
    "additionalProperties": False,
}


def xgrammar_schema_grammar(schema: dict[str, Any]) -> xgr.Grammar:
    """What xgrammar itself builds for ``schema`` in compact mode."""
    return xgr.Grammar.from_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )


def fully_accepts(grammar: xgr.Grammar, text: str) -> bool:
    """Whether ``grammar`` matches all of ``text``, any character, no tokenizer needed."""
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_grammar(
        grammar
    )
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return bool(matcher.accept_string(text)) and bool(matcher.is_terminated())


def test_xgrammar_still_lets_control_characters_into_bounded_strings() -> None:
    # The reason for the rewrite; when a release fixes it, the rewrite can go.
    grammar = xgrammar_schema_grammar({"type": "string", "maxLength": 3})
    assert BOUNDED_CLASS in str(grammar)
    assert fully_accepts(grammar, '"a\tb"')


def test_a_bounded_string_refuses_a_raw_tab_and_keeps_its_bounds(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, {"type": "string", "minLength": 2, "maxLength": 4})
    for text in ('"ab"', '"a b"', '"abcd"', '"a/-_"'):
        assert small.matches(spec, text), f"{text!r} should match"
    for text in ('"a\tb"', '"\t\t"', '"a\nb"', '"a"', '"abcde"', '"ab\\"'):
        assert not small.matches(spec, text), f"{text!r} should not match"


def test_an_object_with_a_bounded_string_works_end_to_end(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, BOUNDED_NAME, COMPACT)
    assert small.matches(spec, '{"name":"abc","a":1}')
    assert small.matches(spec, '{"name":"","a":-20}')
    assert not small.matches(spec, '{"name":"abcd","a":1}')
    assert not small.matches(spec, '{"name":"a\tc","a":1}')
    matcher = small.matcher(spec)
    assert small.accepts_all(matcher, small.ids('{"name":"a'))
    assert not matcher.accept_token(small.id("\t"))  # refused as it is sampled
    assert matcher.accept_token(small.id("b"))


@pytest.mark.parametrize(
    "schema",
    [
        OBJECT_SCHEMA,
        {"type": "string"},
        {"type": "string", "pattern": "^a[\\t]b$", "maxLength": 3},  # the pattern wins
        {"enum": ["a\tb", 1]},
        {"type": "string", "format": "uuid"},
        {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    ],
    ids=["object", "string", "pattern", "enum", "uuid", "array"],
)
def test_a_grammar_without_bounded_strings_is_used_as_xgrammar_built_it(
    schema: dict[str, Any],
) -> None:
    grammar = xgrammar_schema_grammar(schema)
    assert BOUNDED_CLASS not in str(grammar)
    assert bounded_strings_as_json(grammar) is grammar  # not even parsed again


ROUND_TRIP_SCHEMAS: list[tuple[str, dict[str, Any], list[str], list[str], str]] = [
    # name, schema, texts that must match, texts that must not, and a text
    # xgrammar alone accepts: a raw control character in a bounded string
    (
        "object-required-optional",
        {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": -5, "maximum": 120},
                "name": {"type": "string", "minLength": 1, "maxLength": 4},
                "ok": {"type": "boolean"},
            },
            "required": ["id", "name"],
            "additionalProperties": False,
        },
        ['{"id":7,"name":"ab"}', '{"id":-5,"name":"abcd","ok":true}', '{"id":0,"name":"\u00e9"}'],
        ['{"id":7}', '{"id":121,"name":"a"}', '{"id":1,"name":""}', '{"id":1,"name":"abcde"}'],
        '{"id":7,"name":"a\tb"}',
    ),
    (
        "array-bounds",
        {
            "type": "array",
            "items": {"type": "string", "maxLength": 2},
            "minItems": 1,
            "maxItems": 3,
        },
        ['["a"]', '["ab","","x"]'],
        ["[]", '["a","b","c","d"]', '["abc"]', "[1]"],
        '["\x01"]',
    ),
    (
        "defs-ref-anyof",
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "string", "maxLength": 2},
                        "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                    },
                    "required": ["v", "next"],
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/node",
        },
        ['{"v":"a","next":null}', '{"v":"","next":{"v":"xy","next":null}}'],
        ['{"v":"abc","next":null}', '{"v":"a","next":{"v":"a"}}', '{"v":"a","next":1}'],
        '{"v":"","next":{"v":"\t","next":null}}',
    ),
    (
        "enum-const-number",
        {
            "type": "object",
            "properties": {
                "e": {"enum": ['a"b', "\u4e2d", 3]},
                "c": {"const": "x\\y"},
                "n": {"type": "number", "minimum": -1.5, "maximum": 20},
                "s": {"type": "string", "minLength": 2, "maxLength": 2},
            },
            "required": ["e", "c", "n", "s"],
            "additionalProperties": False,
        },
        [
            '{"e":"a\\"b","c":"x\\\\y","n":-1.5,"s":"ab"}',
            '{"e":3,"c":"x\\\\y","n":20,"s":"\u4e2d!"}',
        ],
        ['{"e":"b","c":"x\\\\y","n":0,"s":"ab"}', '{"e":3,"c":"x\\\\y","n":0,"s":"abc"}'],
        '{"e":3,"c":"x\\\\y","n":0,"s":"\x1f\x00"}',
    ),
    (
        "formats-pattern-lengths",
        {
            "type": "object",
            "properties": {
                "ip": {"type": "string", "format": "ipv4"},
                "id": {"type": "string", "format": "uuid"},
                # xgrammar drops maxLength next to a pattern ("abcab" fits)
                "code": {"type": "string", "pattern": "^[a-c]+$", "maxLength": 2},
                "tag": {"type": "string", "minLength": 1, "maxLength": 3},
            },
            "required": ["ip", "id", "code", "tag"],
            "additionalProperties": False,
        },
        ['{"ip":"10.0.0.1","id":"123e4567-e89b-12d3-a456-426614174000","code":"abcab","tag":"t"}'],
        [
            '{"ip":"10.0.0.256","id":"123e4567-e89b-12d3-a456-426614174000","code":"a","tag":"t"}',
            '{"ip":"10.0.0.1","id":"123e4567-e89b-12d3-a456-426614174000","code":"ad","tag":"t"}',
            '{"ip":"10.0.0.1","id":"123e4567-e89b-12d3-a456-426614174000","code":"a","tag":""}',
        ],
        '{"ip":"10.0.0.1","id":"123e4567-e89b-12d3-a456-426614174000","code":"a","tag":"\t"}',
    ),
]


@pytest.mark.parametrize(
    ("schema", "good", "bad", "control"),
    [case[1:] for case in ROUND_TRIP_SCHEMAS],
    ids=[case[0] for case in ROUND_TRIP_SCHEMAS],
)
def test_the_rewrite_changes_only_the_bounded_string_class(
    schema: dict[str, Any], good: list[str], bad: list[str], control: str
) -> None:
    original = xgrammar_schema_grammar(schema)
    # What the rewrite relies on: printed EBNF parses back to itself.
    assert str(xgr.Grammar.from_ebnf(str(original))) == str(original)
    rewritten = bounded_strings_as_json(original)
    assert str(rewritten) == str(original).replace(BOUNDED_CLASS, JSON_CLASS)
    for text in good:
        assert fully_accepts(original, text), f"{text!r} should match"
        assert fully_accepts(rewritten, text), f"{text!r} should still match"
    for text in bad:
        assert not fully_accepts(original, text), f"{text!r} should not match"
        assert not fully_accepts(rewritten, text), f"{text!r} should still not match"
    assert fully_accepts(original, control)
    assert not fully_accepts(rewritten, control)


def test_the_class_text_inside_a_literal_is_left_alone() -> None:
    # A literal can hold the very text of the class; only the class is rewritten.
    grammar = xgr.Grammar.from_ebnf(f'root ::= "{BOUNDED_CLASS}" {BOUNDED_CLASS}')
    literal = '[^"\\\r\n]'
    rewritten = bounded_strings_as_json(grammar)
    assert str(rewritten).count(BOUNDED_CLASS) == 1
    assert fully_accepts(rewritten, literal + "a")
    assert not fully_accepts(rewritten, literal + "\t")


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        # xgrammar alone refuses it: its strict mode closes arrays that do not
        # say what their items are, and then no array has one.
        ({"type": "array", "minItems": 1}, ["[1]", '["a",{}]'], ["[]", "{}"]),
        (
            {"type": "object", "properties": {"tags": {"type": "array", "minItems": 2}}},
            ['{"tags":[1,"b"]}', "{}"],
            ['{"tags":[1]}'],
        ),
    ],
)
def test_arrays_that_say_nothing_of_their_items_hold_any_item(
    small: SmallTokenizer, schema: Any, good: list[str], bad: list[str]
) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, schema)
    XGrammarEngine.check(spec)
    for text in good:
        assert small.matches(spec, text), f"{text!r} should match"
    for text in bad:
        assert not small.matches(spec, text), f"{text!r} should not match"


def test_contains_without_items_is_refused_by_name_not_as_an_invalid_schema() -> None:
    # xgrammar's own error spoke of prefixItems, which the client never wrote.
    spec = GrammarSpec.build(
        RequestKind.JSON_SCHEMA,
        {"type": "array", "contains": {"const": 1}, "maxContains": 2},
        CompileOptions(),
    )
    with pytest.raises(UnenforcedKeywordError, match="'contains'"):
        XGrammarEngine.check(spec)
