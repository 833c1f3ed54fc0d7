"""Request validation in the API process, through vLLM's own SamplingParams.verify path."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams, StructuredOutputsParams

import grammar_guard
from grammar_guard.core.engines.xgrammar import rewrite as xgrammar_rewrite
from grammar_guard.core.errors import EXCERPT_CHARS
from grammar_guard.core.request import limits as input_limits
from grammar_guard.core.request.limits import (
    MAX_GRAMMAR_CHARS,
    DepthScan,
    scan_json_depth,
)
from grammar_guard.vllm_adapter import frontend

grammar_guard.register()

MODEL = SimpleNamespace(is_diffusion=False)
TOKENIZER = object()  # only its presence matters to validation
GUARD = StructuredOutputsConfig(backend="grammar-guard", disable_any_whitespace=True)
XGRAMMAR = StructuredOutputsConfig(backend="xgrammar")


def _validate(
    config: StructuredOutputsConfig, tokenizer: Any = TOKENIZER, **kwargs: Any
) -> SamplingParams:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(**kwargs))
    params._validate_structured_outputs(MODEL, config, tokenizer)
    return params


def test_valid_request_is_marked_for_grammar_guard_and_left_as_written() -> None:
    params = _validate(GUARD, choice=["a", "b"])
    structured = params.structured_outputs
    assert structured is not None
    assert structured._backend == "grammar-guard"
    # vLLM's xgrammar validation rewrites choice into a grammar; ours keeps the request.
    assert structured.choice == ["a", "b"] and structured.grammar is None


def test_other_backends_still_get_vllms_validation() -> None:
    params = _validate(XGRAMMAR, choice=["a", "b"])
    structured = params.structured_outputs
    assert structured is not None
    assert structured._backend == "xgrammar"
    assert structured.choice is None and structured.grammar is not None


@pytest.mark.parametrize(
    ("request_fields", "reason"),
    [
        ({"json": {"type": "objectx"}}, 'Unsupported type "objectx"'),
        ({"regex": "(a"}, "parenthesis"),
        ({"grammar": "root ::= nope"}, "nope"),
        ({"regex": "a\x01"}, "U+0001"),
    ],
)
def test_invalid_request_is_a_validation_error_naming_the_reason(
    request_fields: dict[str, Any], reason: str
) -> None:
    with pytest.raises(VLLMValidationError) as refused:
        _validate(GUARD, **request_fields)
    assert reason in str(refused.value)
    assert refused.value.parameter == "structured_outputs"


def test_request_pinned_to_another_backend_is_refused() -> None:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    assert params.structured_outputs is not None
    params.structured_outputs._backend = "guidance"
    with pytest.raises(VLLMValidationError, match="'guidance'"):
        params._validate_structured_outputs(MODEL, GUARD, TOKENIZER)


def test_missing_tokenizer_is_refused() -> None:
    with pytest.raises(VLLMValidationError, match="tokenizer"):
        _validate(GUARD, tokenizer=None, regex="a+")


def test_diffusion_models_are_refused() -> None:
    params = SamplingParams(structured_outputs=StructuredOutputsParams(regex="a+"))
    with pytest.raises(VLLMValidationError, match="diffusion"):
        params._validate_structured_outputs(SimpleNamespace(is_diffusion=True), GUARD, TOKENIZER)


@pytest.fixture
def stuck_parser(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A parse that never returns until released, as a pathological input would."""
    release = threading.Event()
    monkeypatch.setattr(xgrammar_rewrite, "check", lambda spec, **_: release.wait())
    monkeypatch.setenv("GRAMMAR_GUARD_VALIDATION_BUDGET_S", "0.01")
    yield
    release.set()


def test_a_parse_that_does_not_finish_is_refused_not_waited_for(stuck_parser: None) -> None:
    # A regex no other test sends: an accepted one would be remembered.
    with pytest.raises(VLLMValidationError, match="could not be checked within"):
        _validate(GUARD, regex="stuck+")


def _must_not_parse(spec: Any, **_: Any) -> None:
    raise AssertionError("parsed again")


def test_a_repeated_valid_request_is_accepted_without_a_second_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _validate(GUARD, regex="repeated-[a-z]+")
    monkeypatch.setattr(xgrammar_rewrite, "check", _must_not_parse)
    params = _validate(GUARD, regex="repeated-[a-z]+")
    assert params.structured_outputs is not None
    assert params.structured_outputs._backend == "grammar-guard"


def test_an_accepted_spec_is_judged_again_under_another_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = _two_idn_hostnames_and_a_not("judged again")
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "warn")
    monkeypatch.setattr(frontend, "logger", _Recorder())
    _validate(GUARD, json=schema)
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "refuse")
    with pytest.raises(VLLMValidationError, match="cannot enforce"):
        _validate(GUARD, json=schema)


def test_a_repeated_invalid_request_is_refused_without_a_second_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schema = '{"type": "object", "properties": {"n": {"type": "integerr"}}}'
    errors_before = frontend._metrics.snapshot()["grammar_guard_compile_errors_total"]
    with pytest.raises(VLLMValidationError, match="integerr") as first:
        _validate(GUARD, json=schema)

    monkeypatch.setattr(xgrammar_rewrite, "check", _must_not_parse)
    with pytest.raises(VLLMValidationError) as second:
        _validate(GUARD, json=schema)
    assert str(second.value) == str(first.value)
    errors = frontend._metrics.snapshot()["grammar_guard_compile_errors_total"]
    assert errors == errors_before + 1


# --- keywords xgrammar would not enforce -------------------------------------------------

UNENFORCED_FORMAT = 'grammar_guard_unenforced_total{keyword="format"}'
UNENFORCED_NOT = 'grammar_guard_unenforced_total{keyword="not"}'


def _two_idn_hostnames_and_a_not(tag: str) -> dict[str, Any]:
    """A fresh schema per test (refusals are remembered per schema)."""
    return {
        "type": "object",
        "title": tag,
        "properties": {
            # Next to a pattern of its own a format stays a format (schema/rewrite.py),
            # and neither engine enforces idn-hostname as such.
            "from": {"type": "string", "format": "idn-hostname", "pattern": "^[a-z.]+$"},
            "to": {"type": "string", "format": "idn-hostname", "pattern": "^[a-z.]+$"},
            "n": {"type": "number", "not": {"type": "integer"}},  # fractions: no type says them
        },
    }


class _Recorder:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, message: str, *args: Any) -> None:
        self.warnings.append(message % args)


def test_unenforced_keywords_are_refused_naming_each_and_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GRAMMAR_GUARD_UNENFORCED", raising=False)
    schema = _two_idn_hostnames_and_a_not("refused")
    errors_before = frontend._metrics.snapshot()["grammar_guard_compile_errors_total"]
    with pytest.raises(VLLMValidationError) as refused:
        _validate(GUARD, json=schema)
    reason = str(refused.value)
    assert "'format: idn-hostname' at /properties/from/format" in reason
    assert "'format: idn-hostname' at /properties/to/format" in reason
    assert "'not' at /properties/n/not" in reason
    assert "GRAMMAR_GUARD_UNENFORCED=warn" in reason
    assert refused.value.parameter == "structured_outputs"

    monkeypatch.setattr(xgrammar_rewrite, "check", _must_not_parse)
    with pytest.raises(VLLMValidationError, match="cannot enforce"):
        _validate(GUARD, json=schema)
    errors = frontend._metrics.snapshot()["grammar_guard_compile_errors_total"]
    assert errors == errors_before + 1


def test_warn_mode_accepts_logs_each_keyword_and_counts_it_once_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "warn")
    recorder = _Recorder()
    monkeypatch.setattr(frontend, "logger", recorder)
    before = frontend._metrics.snapshot().as_dict()
    for _ in range(2):
        params = _validate(GUARD, json=_two_idn_hostnames_and_a_not("warned"))
        assert params.structured_outputs is not None
        assert params.structured_outputs._backend == "grammar-guard"
    assert len(recorder.warnings) == 6  # three keywords, two requests
    assert any(
        "'format: idn-hostname' at '/properties/to/format'" in line and "not enforced" in line
        for line in recorder.warnings
    )
    after = frontend._metrics.snapshot().as_dict()
    assert after[UNENFORCED_FORMAT] - before.get(UNENFORCED_FORMAT, 0) == 2  # not 4
    assert after[UNENFORCED_NOT] - before.get(UNENFORCED_NOT, 0) == 2


def test_warn_mode_logs_the_client_s_text_escaped_and_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "warn")
    recorder = _Recorder()
    monkeypatch.setattr(frontend, "logger", recorder)
    forged = "x\r\nERROR grammar-guard: forged line\u2028" + "y" * 10_000
    fraction = {"type": "number", "not": {"type": "integer"}}
    _validate(GUARD, json={"type": "object", "properties": {forged: fraction}})
    # One line for the `not`, one for the name, which xgrammar would also
    # take as another name of the open object: each holds the client's text.
    assert len(recorder.warnings) == 2
    for line in recorder.warnings:
        assert line.isprintable()  # no line break, carriage return or escape of the client's
        assert "'/properties/x\\r\\nERROR grammar-guard: forged line\\u2028yyy" in line
        assert len(line) < 4 * EXCERPT_CHARS
    [not_line] = [line for line in recorder.warnings if "keyword 'not'" in line]
    assert f"({len(f'/properties/{forged}/not')} characters)" in not_line


def test_an_enforced_schema_logs_and_counts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAMMAR_GUARD_UNENFORCED", "warn")
    recorder = _Recorder()
    monkeypatch.setattr(frontend, "logger", recorder)
    before = frontend._metrics.snapshot().labelled
    uuid = {"type": "string", "format": "uuid"}
    _validate(GUARD, json={"type": "object", "properties": {"id": uuid}})
    assert recorder.warnings == []
    assert frontend._metrics.snapshot().labelled == before


@pytest.mark.parametrize(
    ("constraint", "phrase", "reason"),
    [
        ({"grammar": "root ::= ("}, "Invalid grammar specification: ", "grammar"),
        ({"grammar": "start: NAME\nNAME: /[a-z/"}, "Invalid grammar specification: ", "grammar"),
        ({"regex": "a(b"}, "Failed to transform regex into a grammar: ", "regex"),
        ({"json": {"type": "objectx"}}, "Failed to transform json schema into a grammar: ", "obj"),
        (
            {"json": {"type": "array", "uniqueItems": True}},
            "The provided JSON schema contains features not supported by grammar-guard: ",
            "'uniqueItems' at /uniqueItems",
        ),
        (
            {"structural_tag": '{"type": "structural_tag", "format": {"type": "nonsense"}}'},
            "Invalid structural tag specification: ",
            "structural_tag",
        ),
    ],
)
def test_a_refusal_starts_with_vllm_s_phrase_and_gives_the_reason_after_it(
    constraint: dict[str, Any], phrase: str, reason: str
) -> None:
    with pytest.raises(VLLMValidationError) as refused:
        _validate(GUARD, **constraint)
    message = str(refused.value)
    assert message.startswith(phrase), message
    assert reason in message[len(phrase) :], message


# --- hostile text is read in linear time ------------------------------------------------

# An unclosed string of escaped quotes, up to the size limit: the string
# pattern the depth check used to run started over at every quote of it.
UNCLOSED_QUOTES = '"' + '\\"' * ((MAX_GRAMMAR_CHARS - 1) // 2)
# The same quotes closed inside a description: a schema to accept.
QUOTED_DESCRIPTION = (
    '{"type": "string", "description": "' + '\\"' * ((MAX_GRAMMAR_CHARS - 64) // 2) + '"}'
)


@pytest.fixture
def depth_scans(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, DepthScan]]:
    """Each text the depth check scans, with what its scan read."""
    scans: list[tuple[str, DepthScan]] = []

    def recorded(text: str) -> DepthScan:
        scans.append((text, scan := scan_json_depth(text)))
        return scan

    monkeypatch.setattr(input_limits, "scan_json_depth", recorded)
    return scans


@pytest.mark.parametrize("field", ["json", "structural_tag"])
def test_an_unclosed_string_at_the_size_limit_is_refused_after_one_linear_scan(
    depth_scans: list[tuple[str, DepthScan]], field: str
) -> None:
    with pytest.raises(VLLMValidationError, match="is not valid JSON"):
        _validate(GUARD, **{field: UNCLOSED_QUOTES})
    [(text, scan)] = depth_scans
    assert text == UNCLOSED_QUOTES and scan.steps <= 2 * len(text)


def test_a_schema_of_escaped_quotes_at_the_size_limit_is_accepted_after_one_linear_scan(
    depth_scans: list[tuple[str, DepthScan]],
) -> None:
    params = _validate(GUARD, json=QUOTED_DESCRIPTION)
    assert params.structured_outputs is not None
    assert params.structured_outputs._backend == "grammar-guard"
    [(text, scan)] = depth_scans
    assert text == QUOTED_DESCRIPTION and scan.steps <= len(text)
