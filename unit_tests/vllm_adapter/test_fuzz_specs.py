"""Property-based fuzzing of request specs: keys, conversion, validation, parse and compile.

Hypothesis generates structured-output requests of every kind, half of
them plausible (schemas built from real keywords, regexes and grammars
from real syntax) and half hostile (any JSON value, any text, control
characters, lone surrogates, huge and non-finite numbers, wrong Python
types), and checks, against the small real tokenizer of ``conftest.py``:

- ``GrammarSpec.build``, the vLLM request-form conversion and
  ``XGrammarEngine.check``/``compile`` raise ``InvalidGrammarError`` or
  nothing; the frontend, through vLLM's own ``SamplingParams`` validation,
  raises ``VLLMValidationError`` or nothing; no call outlives a bound;
- the same document gives the same key whatever its whitespace and whether
  it came as text or as a value, and the API process and the engine core
  derive the same key from one request;
- keys are hashable, stable across builds and survive pickling (the
  process compiler sends them to its workers);
- whatever the frontend accepts compiles.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, TypeVar

import pydantic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit_tests.conftest import SmallTokenizer
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.structured_output.request import get_structured_output_key

import grammar_guard
from grammar_guard.core.engines.base import GrammarEngine
from grammar_guard.core.engines.routed import RoutedEngine
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.vllm_adapter.request_spec import compile_options, spec_from_key, spec_from_params

grammar_guard.register()

T = TypeVar("T")

# A single call on inputs this small takes milliseconds; far past that is a hang.
CALL_BOUND_S = 20.0
FUZZ = settings(
    max_examples=200,
    deadline=None,  # the bound above is the hang check; the machine's load must not fail a run
    database=None,  # nothing written to the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FRONTEND_CONFIG = StructuredOutputsConfig(backend="grammar-guard", disable_any_whitespace=True)
MODEL = SimpleNamespace(is_diffusion=False)
TOKENIZER = object()  # only its presence matters to validation


def bounded(call: Callable[[], T]) -> T:
    """``call()``, failing the example if it has not returned within CALL_BOUND_S.

    It runs on a daemon thread, so a call that never returns fails the test
    instead of hanging the run.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("value", call()))
        except BaseException as exc:  # handed back to the caller below
            outcome.append(("error", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(CALL_BOUND_S)
    assert outcome, f"did not return within {CALL_BOUND_S:g} s"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value


# What only a compile can find, in the plugin's own words: a grammar no token
# of this vocabulary can start, or one past llguidance's limits at its first mask.
VOCABULARY_REASONS = ("allows no output at all", "past llguidance's limits")


def compiles_unless_it_allows_nothing(engine: GrammarEngine, spec: GrammarSpec) -> None:
    """A spec that passed the API process's check compiles, or is refused as empty.

    Only the compile can see the vocabulary: a check-clean regex such as
    ``~`` allows nothing with the small test vocabulary, which has no ``~``.
    """
    try:
        compiled = bounded(lambda: engine.compile(spec))
    except InvalidGrammarError as exc:
        assert any(reason in exc.reason for reason in VOCABULARY_REASONS), exc.reason
        return
    assert compiled.memory_bytes > 0


# --------------------------------------------------------------------- strategies

# Every code point, surrogates and control characters included.
any_char = st.characters(exclude_categories=())
text = st.text(any_char, max_size=12)
names = st.one_of(st.sampled_from(["a", "b", "name", "x y", "é", ""]), text)
numbers = st.one_of(
    st.integers(),
    # Past Python's 4300-digit limit on int/str conversion.
    st.builds(
        lambda digits, sign: sign * 10**digits, st.integers(4000, 5000), st.sampled_from([1, -1])
    ),
    st.floats(),  # nan and infinities included
)
json_scalars = st.one_of(st.none(), st.booleans(), numbers, text)
# JSON documents: what a client can send as text.
json_documents = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(names, inner, max_size=4)),
    max_leaves=16,
)
# Object keys as an offline caller may write them: ones that are not strings
# (JSON has none) next to their JSON spelling, so that some objects hold both.
keys = st.one_of(st.sampled_from([1, "1", None, "null", False, "false", 0.5, "0.5"]), names)
# Python values as an offline caller may build them: tuples, and the keys above.
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=16,
)

REGEX_PIECES = (
    "a", "b", "0", ".", "[a-c]", "[^x]", "\\d", "\\w", "\\s", "(", ")", "(?:", "|", "*", "+",
    "?", "{2}", "{1,3}", "{0,}", "^", "$", "\\", "[", "]", "-", "\\u00e9", "\n", "\t", "\x00",
    "(?=", "\\1", "{99999}",
    # Repeat counts past every engine's limit and past Python's int conversion.
    "{99999999}", "{1,99999999}", "{" + "9" * 5000 + "}", "{1," + "9" * 400 + "}",
)  # fmt: skip
regexes = st.one_of(st.lists(st.sampled_from(REGEX_PIECES), max_size=10).map("".join), text)

# Bounds a client may send: small ones, and ones no engine can hold in a machine word.
small_ints = st.one_of(st.integers(min_value=-3, max_value=40), st.sampled_from([2**64, 10**400]))
formats = st.sampled_from(["ipv4", "uuid", "date", "email", "nope"])
leaf_schemas = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean", "null"])},
    optional={
        "minLength": small_ints,
        "maxLength": small_ints,
        "minimum": small_ints,
        "maximum": small_ints,
        "pattern": regexes,
        "format": formats,
        "enum": st.lists(json_scalars, max_size=3),
        "const": json_scalars,
        "description": text,
    },
)


def _compound(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(names, inner, max_size=3)},
            optional={
                "required": st.lists(names, max_size=3),
                "additionalProperties": st.one_of(st.booleans(), inner),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.just("array"), "items": inner},
            optional={"minItems": small_ints, "maxItems": small_ints},
        ),
        st.builds(lambda branches: {"anyOf": branches}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda definition: {"$defs": {"d": definition}, "$ref": "#/$defs/d"}, inner),
        # A definition nothing uses: the engines still read it.
        st.builds(lambda unused, used: {"$defs": {"u": unused}, **used}, inner, leaf_schemas),
    )


plausible_schemas = st.recursive(leaf_schemas, _compound, max_leaves=6)
schemas = st.one_of(plausible_schemas, json_values)

EBNF_PIECES = (
    "root ::= ", "x ::= ", '"a"', '"b"', "x", "root", " ", "|", "(", ")", "*", "+", "?",
    "[a-z]", "[^\"]", "\n", "{2,3}", "#c\n", '"\\n"', '"', "::=",
)  # fmt: skip
LARK_PIECES = (
    "start: ", "x: ", "NUM: ", '"a"', "x", "NUM", "/[0-9]+/", " ", "|", "(", ")", "*", "+",
    "?", "\n", "%import common.NUMBER\n", "/",
)  # fmt: skip
grammars = st.one_of(
    st.lists(st.sampled_from(EBNF_PIECES), max_size=12).map("".join),
    st.lists(st.sampled_from(LARK_PIECES), max_size=12).map("".join),
    text,
)
choices = st.one_of(st.lists(text, max_size=5), json_values)

tag_formats = st.recursive(
    st.one_of(
        st.builds(lambda value: {"type": "const_string", "value": value}, text),
        st.builds(lambda schema: {"type": "json_schema", "json_schema": schema}, plausible_schemas),
        st.just({"type": "any_text"}),
    ),
    lambda inner: st.one_of(
        st.builds(
            lambda begin, content, end: {
                "type": "tag",
                "begin": begin,
                "content": content,
                "end": end,
            },
            text,
            inner,
            text,
        ),
        st.builds(
            lambda items: {"type": "sequence", "elements": items}, st.lists(inner, max_size=3)
        ),
    ),
    max_leaves=4,
)
plausible_tags = st.one_of(
    st.builds(lambda fmt: {"type": "structural_tag", "format": fmt}, tag_formats),
    st.builds(  # the older form vLLM still accepts
        lambda begin, schema, trigger: {
            "structures": [{"begin": begin, "schema": schema, "end": "</x>"}],
            "triggers": [trigger],
        },
        text,
        plausible_schemas,
        text,
    ),
)
structural_tags = st.one_of(plausible_tags, json_values)

SOURCES: dict[RequestKind, st.SearchStrategy[Any]] = {
    RequestKind.JSON_SCHEMA: schemas,
    RequestKind.JSON_OBJECT: st.none(),
    RequestKind.REGEX: regexes,
    RequestKind.CHOICE: choices,
    RequestKind.GRAMMAR: grammars,
    RequestKind.STRUCTURAL_TAG: structural_tags,
}
# The same, limited to JSON documents (string keys, no tuples).
DOCUMENTS: dict[RequestKind, st.SearchStrategy[Any]] = {
    RequestKind.JSON_SCHEMA: st.one_of(plausible_schemas, st.booleans(), json_documents),
    RequestKind.CHOICE: st.one_of(st.lists(text, max_size=5), json_documents),
    RequestKind.STRUCTURAL_TAG: st.one_of(plausible_tags, json_documents),
}
# Values of the wrong Python type, as an offline caller could pass them.
wrong_types = st.one_of(
    st.none(), st.booleans(), numbers, st.binary(max_size=8), st.just(object()), st.just({1, 2})
)
options = st.builds(CompileOptions, any_whitespace=st.booleans())


@st.composite
def kinds_and_sources(draw: st.DrawFn) -> tuple[RequestKind, Any]:
    kind = draw(st.sampled_from(RequestKind))
    source = draw(st.one_of(SOURCES[kind], wrong_types, json_values))
    if kind.text_is_json and draw(st.booleans()):
        source = _as_json_text(source, draw)
    return kind, source


def _as_json_text(value: Any, draw: st.DrawFn) -> Any:
    """``value`` written as JSON text with random whitespace, when it can be written at all."""
    indent = draw(st.sampled_from([None, 0, 2, "\t"]))
    separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\r\n ")]))
    try:
        return draw(st.sampled_from(["", " ", "\n\t"])) + json.dumps(
            value, indent=indent, separators=separators, ensure_ascii=draw(st.booleans())
        )
    except (TypeError, ValueError):
        return value  # not JSON (a set, an object, a huge integer): the value itself then


def _build(kind: RequestKind, source: Any, opts: CompileOptions) -> GrammarSpec | None:
    """The spec, or None when it is refused; any other exception fails the property."""
    try:
        return bounded(lambda: GrammarSpec.build(kind, source, opts))
    except InvalidGrammarError:
        return None


def _checked(spec: GrammarSpec) -> bool:
    try:
        bounded(lambda: XGrammarEngine.check(spec))
    except InvalidGrammarError:
        return False
    return True


# ----------------------------------------------------------------------- properties


@FUZZ
@given(kinds_and_sources(), options)
def test_build_refuses_with_invalid_grammar_error_or_gives_a_stable_hashable_key(
    kind_and_source: tuple[RequestKind, Any], opts: CompileOptions
) -> None:
    kind, source = kind_and_source
    spec = _build(kind, source, opts)
    if spec is None:
        return
    again = GrammarSpec.build(kind, source, opts)
    assert again == spec and hash(again) == hash(spec)
    assert {spec: 1}[again] == 1
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert isinstance(spec.text, str) and spec.kind is kind


@FUZZ
@given(st.data())
def test_the_same_document_gives_the_same_key_as_text_or_as_a_value(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(list(DOCUMENTS)))
    document = data.draw(DOCUMENTS[kind])
    spellings = [_as_json_text(document, data.draw), _as_json_text(document, data.draw)]
    if not isinstance(document, str):  # a str value is read as JSON text, not as a document
        spellings.append(document)
    opts = data.draw(options)
    # One key or one refusal: never a key for one spelling and something else for another.
    specs = {_build(kind, spelling, opts) for spelling in spellings}
    assert len(specs) == 1, specs


@FUZZ
@given(kinds_and_sources(), options)
def test_parse_and_compile_raise_only_invalid_grammar_error_and_accepted_specs_compile(
    small: SmallTokenizer, kind_and_source: tuple[RequestKind, Any], opts: CompileOptions
) -> None:
    spec = _build(*kind_and_source, opts)
    if spec is None or not _checked(spec):
        return
    compiles_unless_it_allows_nothing(small.engine, spec)


def _structured_outputs_fields(data: st.DataObject) -> dict[str, Any]:
    field = data.draw(
        st.sampled_from(["json", "regex", "choice", "grammar", "json_object", "structural_tag"])
    )
    if field == "json_object":
        value: Any = data.draw(st.one_of(st.just(True), wrong_types, text))
    elif field == "structural_tag":
        tag = data.draw(structural_tags)
        value = data.draw(st.one_of(st.just(_as_json_text(tag, data.draw)), wrong_types))
    else:
        kind = {
            "json": RequestKind.JSON_SCHEMA,
            "regex": RequestKind.REGEX,
            "choice": RequestKind.CHOICE,
            "grammar": RequestKind.GRAMMAR,
        }[field]
        value = data.draw(st.one_of(SOURCES[kind], wrong_types))
        if kind.text_is_json and data.draw(st.booleans()):
            value = _as_json_text(value, data.draw)
    return {field: value}


def _params(data: st.DataObject) -> StructuredOutputsParams | None:
    """Request params with one drawn field, or None where vLLM's own dataclass refuses them.

    ``StructuredOutputsParams`` checks field types (pydantic) and that exactly
    one constraint is set; what it refuses never reaches the plugin.
    """
    try:
        return StructuredOutputsParams(**_structured_outputs_fields(data))
    except (pydantic.ValidationError, VLLMValidationError):
        return None


def _engine_key(params: StructuredOutputsParams, opts: CompileOptions) -> GrammarSpec:
    """The key the engine core derives from the request vLLM hands it."""
    return spec_from_key(*get_structured_output_key(params), opts)


@FUZZ
@given(st.data(), options)
def test_request_conversion_refuses_with_invalid_grammar_error_and_matches_the_engine_key(
    data: st.DataObject, opts: CompileOptions
) -> None:
    params = _params(data)
    if params is None:
        return
    try:
        spec = bounded(lambda: spec_from_params(params, opts))
    except InvalidGrammarError:
        return
    assert bounded(lambda: _engine_key(params, opts)) == spec


@FUZZ
@given(st.data())
def test_frontend_validation_refuses_with_vllm_validation_error_and_what_it_accepts_compiles(
    routed: RoutedEngine, data: st.DataObject
) -> None:
    structured = _params(data)
    if structured is None:
        return
    params = SamplingParams(structured_outputs=structured)
    try:
        bounded(lambda: params._validate_structured_outputs(MODEL, FRONTEND_CONFIG, TOKENIZER))
    except VLLMValidationError:
        return
    assert structured._backend == "grammar-guard"
    engine_spec = _engine_key(structured, compile_options(FRONTEND_CONFIG))
    # The API process routes; what it accepts compiles on the engine it routed to.
    compiles_unless_it_allows_nothing(routed, engine_spec)
