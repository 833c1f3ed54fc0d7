"""Checks on engine outputs that do not go through the backend under test."""

from __future__ import annotations

import json
from typing import Any

import xgrammar as xgr

from grammar_guard.demo.cases import Case

# A tokenizer-free compiler: matching raw text needs no vocabulary.
_TEXT_COMPILER = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)


def _grammar_for(structured_outputs: dict[str, Any], compact: bool) -> xgr.Grammar:
    if "json" in structured_outputs:
        schema = json.dumps(structured_outputs["json"])
        try:
            return _json_grammar(schema, compact, strict=True)
        except RuntimeError:
            # xgrammar's strict mode (closed objects) cannot express some
            # schemas another engine serves, minProperties without properties
            # for one; a prefix oracle may be the looser of the two.
            return _json_grammar(schema, compact, strict=False)
    if structured_outputs.get("json_object"):
        return xgr.Grammar.from_json_schema(
            '{"type": "object"}',
            any_whitespace=not compact,
            separators=(",", ":") if compact else None,
        )
    if "regex" in structured_outputs:
        return xgr.Grammar.from_regex(structured_outputs["regex"])
    raise ValueError(f"no prefix oracle for {sorted(structured_outputs)}")


def _json_grammar(schema: str, compact: bool, *, strict: bool) -> xgr.Grammar:
    return xgr.Grammar.from_json_schema(
        schema,
        any_whitespace=not compact,
        separators=(",", ":") if compact else None,
        strict_mode=strict,
    )


def assert_valid_prefix(structured_outputs: dict[str, Any], text: str, *, compact: bool) -> None:
    """A length-stopped output must still be a prefix of some valid output."""
    compiled = _TEXT_COMPILER.compile_grammar(_grammar_for(structured_outputs, compact))
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    assert matcher.accept_string(text), f"{text!r} is not a valid prefix"


def assert_satisfies(case: Case, text: str, finish_reason: str | None, *, compact: bool) -> None:
    if finish_reason == "length":
        assert_valid_prefix(case.structured_outputs, text, compact=compact)
    else:
        assert finish_reason == "stop", f"{case.name} finished with {finish_reason!r}: {text!r}"
        case.check(text)
