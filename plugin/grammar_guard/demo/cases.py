"""One bounded request per request kind, each with an independent checker.

The checkers use general-purpose validators (``jsonschema``, ``re``,
``lark``), never the grammar engine under test, so an output the backend
wrongly let through is caught. Every grammar here is bounded so that even a
random-weight model finishes inside a small ``max_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
import lark

PERSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "role", "active"],
    "additionalProperties": False,
}

TAGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tags": {
            "type": "array",
            "items": {"enum": ["red", "green", "blue"]},
            "minItems": 1,
            "maxItems": 3,
        },
        "point": {
            "type": "object",
            "properties": {
                "x": {"type": "integer", "minimum": -9, "maximum": 9},
                "y": {"type": "integer", "minimum": -9, "maximum": 9},
            },
            "required": ["x", "y"],
            "additionalProperties": False,
        },
    },
    "required": ["tags", "point"],
    "additionalProperties": False,
}

PLATE_REGEX = r"[A-Z]{2}-\d{3}-[a-z]{2}"
CHOICES = ["yes", "no", 'say "maybe"', "naïve ✓"]
EBNF_GRAMMAR = 'root ::= "call(" arg ("," arg)? ")"\narg ::= [a-z] [0-9]'
# The same language as EBNF_GRAMMAR, for lark to check outputs with.
EBNF_AS_LARK = 'start: "call(" ARG ("," ARG)? ")"\nARG: /[a-z][0-9]/'
LARK_GRAMMAR = 'start: "sum " NUM " + " NUM\nNUM: /[0-9]{1,3}/'
TAG_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
STRUCTURAL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "tag",
        "begin": "<weather>",
        "content": {"type": "json_schema", "json_schema": TAG_JSON_SCHEMA},
        "end": "</weather>",
    },
}
# vLLM's own structured-output test schema: its only pattern names a listed
# property, which led llguidance into a dead end (core/engines/llguidance/listed_patterns.py).
LISTED_PATTERN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "multipleOf": 5},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 10, "maxLength": 20}},
    },
    "required": ["score", "tags"],
    "additionalProperties": False,
    "patternProperties": {"^score$": {"type": "integer"}},
}
_TAG_PATTERN = re.compile(r"<weather>(.*)</weather>", re.DOTALL)


def check_json(schema: dict[str, Any]) -> Callable[[str], None]:
    def check(text: str) -> None:
        jsonschema.validate(json.loads(text), schema)

    return check


def check_regex(pattern: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        if not re.fullmatch(pattern, text):
            raise AssertionError(f"{text!r} does not match {pattern!r}")

    return check


def check_choice(text: str) -> None:
    if text not in CHOICES:
        raise AssertionError(f"{text!r} is not one of {CHOICES}")


def check_lark(grammar: str) -> Callable[[str], None]:
    parser = lark.Lark(grammar, parser="earley")

    def check(text: str) -> None:
        parser.parse(text)

    return check


def check_json_object(text: str) -> None:
    if not isinstance(json.loads(text), dict):
        raise AssertionError(f"{text!r} is not a JSON object")


def check_structural_tag(text: str) -> None:
    found = _TAG_PATTERN.fullmatch(text)
    if not found:
        raise AssertionError(f"{text!r} is not wrapped in <weather>...</weather>")
    jsonschema.validate(json.loads(found.group(1)), TAG_JSON_SCHEMA)


@dataclass(frozen=True)
class Case:
    name: str
    # Keyword arguments of vLLM's StructuredOutputsParams, which is also the
    # body of the OpenAI server's ``structured_outputs`` extra field.
    structured_outputs: dict[str, Any]
    check: Callable[[str], None]


CASES: tuple[Case, ...] = (
    Case("json_schema", {"json": PERSON_SCHEMA}, check_json(PERSON_SCHEMA)),
    Case("json_schema_nested", {"json": TAGS_SCHEMA}, check_json(TAGS_SCHEMA)),
    Case("regex", {"regex": PLATE_REGEX}, check_regex(PLATE_REGEX)),
    Case("choice", {"choice": CHOICES}, check_choice),
    Case("ebnf_grammar", {"grammar": EBNF_GRAMMAR}, check_lark(EBNF_AS_LARK)),
    Case("lark_grammar", {"grammar": LARK_GRAMMAR}, check_lark(LARK_GRAMMAR)),
    Case("structural_tag", {"structural_tag": json.dumps(STRUCTURAL_TAG)}, check_structural_tag),
)
