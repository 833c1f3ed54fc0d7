"""Cases whose constraint does not parse, is invalid, cannot be enforced or allows nothing."""

from __future__ import annotations

from typing import Any

from harness.bad_input.builders import (
    completion,
    constrained,
    grammar_refused,
    raw_body,
    refused,
    regex_constrained,
    regex_refused,
    schema_constrained,
    schema_refused,
)
from harness.bad_input.case import Case, regex_output


def _malformed_json() -> list[Case]:
    not_json = "is not valid JSON"
    return [
        schema_refused("json-text-unterminated", '{"type": "object"', not_json),
        schema_refused("json-text-trailing-comma", '{"type": "object",}', not_json),
        schema_refused("json-text-single-quotes", "{'type': 'object'}", not_json),
        schema_refused("json-text-trailing-garbage", '{"type": "object"} trailing', not_json),
        schema_refused("json-text-empty", "", "must not be empty"),
        schema_refused("json-text-whitespace-only", " \n\t ", "must not be empty"),
        schema_refused("json-text-nan", '{"type": "number", "maximum": NaN}', "not serialisable"),
        schema_refused(
            "json-text-5000-digit-integer",
            '{"type": "integer", "maximum": 1' + "0" * 5000 + "}",
            not_json,
        ),
        schema_refused(
            "json-text-array", '[{"type": "string"}]', "must be a JSON object or boolean"
        ),
        schema_refused("json-text-string", '"object"', "must be a JSON object or boolean"),
        refused("body-not-json", raw_body(lambda model: "{not json"), "JSON decode error"),
        refused(
            "body-truncated",
            raw_body(lambda model: completion({"json": {"type": "object"}})(model)[:-20]),
            "JSON decode error",
        ),
        refused(
            "body-invalid-utf8",
            raw_body(
                lambda model: completion({"json": {"type": "object"}})(model)[:-3] + b'\xff"}}'
            ),
            "error parsing the body",
        ),
    ]


def _invalid_schemas() -> list[Case]:
    return [
        schema_refused("schema-unknown-type", {"type": "objectx"}, 'Unsupported type "objectx"'),
        schema_refused("schema-type-is-a-number", {"type": 5}, "Type should be a string"),
        schema_refused(
            "schema-properties-not-an-object",
            {"type": "object", "properties": [1]},
            "properties must be an object",
        ),
        schema_refused(
            "schema-required-not-a-list",
            {"type": "object", "required": "a"},
            "required must be an array",
        ),
        schema_refused(
            "schema-minimum-above-maximum",
            {"type": "integer", "minimum": 5, "maximum": 2},
            "minimum greater than maximum",
        ),
        schema_refused(
            "schema-empty-number-range",
            {"type": "number", "minimum": 2.5, "maximum": 1.5},
            "empty range",
        ),
        schema_refused(
            "schema-empty-exclusive-range",
            {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2},
            "minimum greater than maximum",
        ),
        schema_refused(
            "schema-minlength-above-maxlength",
            {"type": "string", "minLength": 5, "maxLength": 2},
            "greater than maxLength",
        ),
        schema_refused(
            "schema-minitems-above-maxitems",
            {"type": "array", "minItems": 5, "maxItems": 2},
            "greater than maxItems",
        ),
        schema_refused("schema-empty-enum", {"enum": []}, "enum array must not be empty"),
        schema_refused("schema-dangling-ref", {"$ref": "#/$defs/missing"}, "Cannot find field"),
        schema_refused(
            "schema-invalid-pattern", {"type": "string", "pattern": "[a-"}, "Regex parsing error"
        ),
        schema_refused("schema-false", "false", "cannot accept any value"),
        schema_refused(
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
    return schema_refused(name, schema, f"cannot enforce: {finding}")


def _unsupported_keywords() -> list[Case]:
    return [
        schema_refused(
            "schema-pattern-backreference",
            {"type": "string", "pattern": "(a)\\1"},
            "Backreference is not supported",
        ),
        regex_refused("regex-lookahead", "(?=a)a", "Lookahead is not supported"),
        # xgrammar cannot express it; llguidance enforces it, so routing serves it.
        schema_constrained("schema-minproperties", {"type": "object", "minProperties": 2}),
        # Items of any string have no end; items of a few values are listed as arrays.
        _not_enforceable(
            "schema-unique-items",
            {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "'uniqueItems' at /uniqueItems",
        ),
        schema_constrained(
            "schema-unique-items-of-values",
            {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True},
        ),
        _not_enforceable("schema-not", {"not": {"type": "integer"}}, "'not' at /not"),
        # A condition whose complement is past what is written (a pattern of 81
        # states) stays refused; one of bounds, or of a small pattern (its
        # complement written from its automaton), is written out as branches and served.
        _not_enforceable(
            "schema-if-then",
            {"type": "string", "if": {"pattern": "^(?:ab){40}"}, "then": {"maxLength": 1}},
            "'if' at /if, 'then' at /then",
        ),
        schema_constrained(
            "schema-if-then-pattern",
            {"type": "string", "if": {"pattern": "^a"}, "then": {"maxLength": 1}},
        ),
        schema_constrained(
            "schema-if-then-bounds",
            {"type": "string", "if": {"maxLength": 1}, "then": {"pattern": "^a$"}},
        ),
        # xgrammar would drop the maxLength; llguidance enforces both.
        schema_constrained(
            "schema-pattern-with-maxlength", {"type": "string", "pattern": "^a+$", "maxLength": 2}
        ),
        # Never fetched: a remote reference is refused, not resolved.
        _not_enforceable(
            "schema-remote-ref",
            {"$ref": "http://127.0.0.1:9/schema.json"},
            "'$ref: http://127.0.0.1:9/schema.json' at /$ref",
        ),
        # Draft 2020-12 reads unknown keywords as annotations: served, not refused.
        schema_constrained("schema-unknown-keyword", {"type": "integer", "frobnicate": True}),
        # xgrammar writes email inexactly; llguidance exactly, so routing serves it.
        schema_constrained("schema-inexact-format", {"type": "string", "format": "email"}),
        schema_constrained("schema-exact-format", {"type": "string", "format": "ipv4"}),
        schema_constrained("schema-multiple-of", {"type": "integer", "multipleOf": 7}),
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
        schema_refused(
            "schema-allof-string-and-integer",
            {"allOf": [{"type": "string"}, {"type": "integer"}]},
            "Unsatisfiable schema: incompatible types",
        ),
        # The const is decided against the type beside it: no value is left.
        schema_refused(
            "schema-const-of-the-wrong-type",
            {"type": "integer", "const": "x"},
            "cannot accept any value",
        ),
        schema_refused(
            "schema-required-but-forbidden",
            {"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False},
            "Unsatisfiable schema: required property 'a' is unsatisfiable",
        ),
    ]


def _regexes() -> list[Case]:
    return [
        regex_refused("regex-unclosed-class", "[a-", "Unclosed '['"),
        regex_refused("regex-unclosed-group", "(a", "parenthesis"),
        regex_refused("regex-dangling-quantifier", "*a", "Expect element"),
        regex_refused("regex-reversed-range", "[z-a]", "lower bound is larger than upper bound"),
        regex_refused(
            "regex-5000-nested-groups", "(" * 5000 + "a" + ")" * 5000, "Nest layer exceeded"
        ),
        regex_refused("regex-lone-surrogate", "\ud800", "surrogates not allowed"),
        # Catastrophic for backtracking engines; xgrammar's automaton does not backtrack.
        regex_constrained("regex-catastrophic-backtracking", "(a+)+$", "a+"),
        regex_constrained("regex-nested-stars", "((a*)*)*b", "a*b"),
        regex_constrained("regex-counted-100000", "a{100000}"),
        regex_constrained("regex-counted-up-to-a-million", "a{1,1000000}"),
        regex_constrained("regex-nested-counted", "((a{1,10}){1,10}){1,10}", "a{1,1000}"),
        regex_constrained("regex-tab-and-newline", "a\tb\n?"),
    ]


def _grammars() -> list[Case]:
    return [
        grammar_refused("ebnf-undefined-rule", "root ::= nothing_here", "nothing_here"),
        grammar_refused(
            "ebnf-no-root-rule", 'start ::= "a"', 'root rule with name "root" is not found'
        ),
        grammar_refused("ebnf-unterminated-string", 'root ::= "a', "in string literal"),
        grammar_refused(
            "ebnf-50000-nested-groups",
            "root ::= " + "(" * 50000 + '"a"' + ")" * 50000,
            "Nest layer exceeded",
        ),
        grammar_refused("lark-unknown-name", "start: foo\n", "unknown name 'foo'"),
        grammar_refused("lark-unclosed-group", "start: (\n", "expected ')'"),
        grammar_refused(
            "lark-500-nested-groups",
            "start: " + "(" * 500 + '"a"' + ")" * 500,
            "nested deeper than",
        ),
        grammar_refused("grammar-empty", "", "grammar must not be empty"),
        grammar_refused("grammar-whitespace-only", " \n\t", "grammar must not be empty"),
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


CONSTRAINT_CASES: tuple[Case, ...] = (
    *_malformed_json(),
    *_invalid_schemas(),
    *_unsupported_keywords(),
    *_unsatisfiable(),
    *_regexes(),
    *_grammars(),
)
