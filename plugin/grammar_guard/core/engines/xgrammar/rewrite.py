"""What xgrammar is given for a request: the spec parsed, with the plugin's rewrites applied.

``check`` and ``compile`` both go through :func:`parse_enforced`, so a
grammar the API process accepted is exactly the grammar the engine
compiles. The rewrites make xgrammar's output what the request means: JSON
strings without raw control characters, vLLM's older structural-tag form,
compact JSON inside structural tags, JSON schemas in the equivalent form
xgrammar enforces (:mod:`grammar_guard.core.schema.rewrite`); and the
schema analysis refuses what xgrammar would still silently not enforce.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

import xgrammar as xgr

from grammar_guard.core.engines.base import small_specs_remembered
from grammar_guard.core.engines.refusals import invalid_spec_on_error
from grammar_guard.core.engines.xgrammar.capabilities import XGRAMMAR
from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.request.grammar_text import EBNF_LITERAL_OR_CLASS, grammar_is_lark
from grammar_guard.core.request.spec import GrammarSpec, RequestKind
from grammar_guard.core.schema.analysis import analyze
from grammar_guard.core.schema.capabilities import EngineCapabilities
from grammar_guard.core.schema.children import with_children
from grammar_guard.core.schema.findings import Finding, as_written
from grammar_guard.core.schema.open_objects import objects_opened, true_keywords_added
from grammar_guard.core.schema.pointers import join_pointer
from grammar_guard.core.schema.rewrite import rewrite_schema, rewritten_schema_text
from grammar_guard.core.settings import UnenforcedPolicy

# xgrammar prefixes native errors with "[hh:mm:ss] /path/file.cc:123: ".
_NATIVE_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")
# Compact JSON: xgrammar needs the separators as well as any_whitespace=False.
_COMPACT_SEPARATORS = (",", ":")
_ANY_OBJECT_SCHEMA = '{"type": "object"}'
# xgrammar 0.2.8 writes a character of a string with minLength or maxLength
# as this class, which lets raw control characters (tab, U+0001...) into the
# string: output that is not JSON. Strings without a length bound get the
# second class, which JSON allows; both are as xgrammar prints them.
_BOUNDED_STRING_CHARACTER = r"[^\"\\\r\n]"
_JSON_STRING_CHARACTER = r"[^\0-\x1f\"\\\r\n]"
# Goes into the engine fingerprint: a grammar compiled before a rewrite
# existed must not be loaded from disk by an engine that applies it.
GRAMMAR_REWRITES = "bounded-string-json-characters,absent-properties-unlisted,arrays-opened"
# Keywords that let a name an object does not list in: next to them, a
# property listed as false is not the same as one left out.
_OPENING_KEYWORDS = frozenset({"patternProperties", "unevaluatedProperties"})
_REMEMBERED_TEXTS = 32
# Structural-tag formats whose "json_schema" is a JSON schema xgrammar compiles.
_SCHEMA_FORMATS = ("json_schema", "qwen_xml_parameter")

logger = logging.getLogger(__name__)


def native_reason(exc: BaseException) -> str:
    """An xgrammar error on one line, without the source location native code prefixes."""
    first, *rest = str(exc).strip().splitlines() or [type(exc).__name__]
    return " ".join([_NATIVE_PREFIX.sub("", first), *rest]).strip()


def choice_as_ebnf(choices: Sequence[str]) -> str:
    # json.dumps yields a quoted literal whose escapes (\" \\ \n \uXXXX) are
    # the ones xgrammar's EBNF string syntax reads back.
    return "root ::= " + " | ".join(json.dumps(choice, ensure_ascii=False) for choice in choices)


def check(
    spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
) -> tuple[Finding, ...]:
    """Parse ``spec``; raise :class:`InvalidGrammarError` if it is invalid.

    Also applies the unenforced-keyword policy: refuse raises
    :class:`UnenforcedKeywordError`, warn returns the findings (empty when
    xgrammar enforces the whole schema) for the caller to report. Needs no
    tokenizer: routing's policy calls it (``XGrammarEngine.check`` is it).
    """
    return parse_enforced(spec, unenforced)[1]


@small_specs_remembered
def parse_enforced(
    spec: GrammarSpec, unenforced: UnenforcedPolicy
) -> tuple[xgr.Grammar, tuple[Finding, ...]]:
    """The parse step of ``check`` and ``compile``: the grammar, then the schema analysis.

    Both read the spec's schemas as rewritten (:mod:`grammar_guard.core.schema.rewrite`),
    so what is analysed is what is compiled; a small spec is parsed once for
    both (:func:`~grammar_guard.core.engines.base.small_specs_remembered`).
    """
    text = _enforced_text(spec)
    with invalid_spec_on_error(spec, native_reason):
        grammar = _PARSERS[spec.kind](spec, text)
    findings = unenforced_findings(spec.kind, text)
    if findings and text is not spec.text:
        sent = json.loads(spec.text)
        findings = tuple(as_written(finding, sent) for finding in findings)
    if findings and unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, findings)
    return grammar, findings


def _enforced_text(spec: GrammarSpec) -> str:
    """The text xgrammar is given for ``spec``: its JSON schemas rewritten, the rest as sent."""
    if spec.kind is RequestKind.JSON_SCHEMA:
        return _xgrammar_forms_text(rewritten_schema_text(spec.text, spec.options.open_objects))
    if spec.kind is RequestKind.STRUCTURAL_TAG:
        tag = json.loads(spec.text)
        changed = False
        for _, holder, key, _ in _tag_schemas(tag):
            schema = rewrite_schema(holder[key])
            if spec.options.open_objects:
                schema = objects_opened(schema)
            rewritten = xgrammar_forms(schema)
            changed = changed or rewritten is not holder[key]
            holder[key] = rewritten
        return json.dumps(tag, separators=(",", ":"), ensure_ascii=False) if changed else spec.text
    return spec.text


@functools.lru_cache(maxsize=_REMEMBERED_TEXTS)
def _xgrammar_forms_text(text: str) -> str:
    """:func:`xgrammar_forms` of the schema ``text``; ``text`` if unchanged."""
    if "false" not in text and "minItems" not in text and "contains" not in text:
        return text  # the common case, without parsing
    document = json.loads(text)
    written = xgrammar_forms(document)
    if written is document:
        return text
    return json.dumps(written, separators=(",", ":"), ensure_ascii=False)


def xgrammar_forms(schema: Any) -> Any:
    """``schema`` as xgrammar builds what it means: :func:`absent_properties_unlisted`,
    then :func:`arrays_opened`."""
    return arrays_opened(absent_properties_unlisted(schema))


def absent_properties_unlisted(schema: Any) -> Any:
    """``schema`` with each property it forbids (``"a": false``) no longer listed.

    xgrammar cannot build a ``false`` subschema ("Schema 'false' cannot
    accept any value"), which the schema rewrite writes for a property that
    must be absent. xgrammar closes objects (strict mode), so a property an
    object does not list is refused, the same as one it lists as ``false``;
    where something else would let an unlisted name in
    (``additionalProperties`` other than ``false``, patterns, unevaluated
    properties) the entry stays. So does a property ``required`` names: no
    object passes, which xgrammar's own error says.
    """
    if not isinstance(schema, dict):
        return schema
    node = with_children(schema, "", lambda child, _, __: absent_properties_unlisted(child))
    properties = node.get("properties")
    if not isinstance(properties, dict) or not any(v is False for v in properties.values()):
        return node
    if node.get("additionalProperties", False) is not False or node.keys() & _OPENING_KEYWORDS:
        return node
    required = node.get("required")
    needed = set(required) if isinstance(required, list) else set()
    listed = {
        name: value for name, value in properties.items() if value is not False or name in needed
    }
    return {**node, "properties": listed}


def arrays_opened(schema: Any) -> Any:
    """``schema`` with ``"items": true`` where it bounds arrays but says nothing of items.

    xgrammar reads such a schema as arrays of no items at all (its strict
    mode closes them), and so refuses ``{"type": "array", "minItems": 1}``
    ("minItems is greater than the number of prefixItems, but additional
    items are not allowed") and builds ``contains`` as ``[]`` alone. JSON
    Schema lets any item in, as ``"items": true`` says to xgrammar. Not in
    a document that reads ``unevaluatedItems``: ``items`` evaluates the
    items, which would leave that keyword nothing to say.
    """
    return true_keywords_added(schema, _items_unsaid, read_by=("unevaluatedItems",))


def _items_unsaid(node: dict[str, Any]) -> tuple[str, ...]:
    if "items" in node or "prefixItems" in node:
        return ()
    # Not for minContains or maxContains alone, which say nothing without a
    # contains: next to "items", xgrammar would read minContains as a count.
    asks_for_items = "contains" in node or node.get("minItems", 0) != 0
    return ("items",) if asks_for_items else ()


def unenforced_findings(kind: RequestKind, text: str) -> tuple[Finding, ...]:
    """The JSON-Schema keywords of a spec's ``text`` that xgrammar would silently not enforce.

    For a JSON schema, and for every JSON schema inside a structural tag
    (located by pointers into the tag). ``json_object`` is ``{"type":
    "object"}``, which xgrammar enforces; other kinds have no schema.
    """
    if kind is RequestKind.JSON_SCHEMA:
        return tuple(analyze(json.loads(text), XGRAMMAR))
    if kind is RequestKind.STRUCTURAL_TAG:
        return tuple(
            finding
            for pointer, holder, key, caps in _tag_schemas(json.loads(text))
            for finding in analyze(holder[key], caps, base_pointer=pointer)
        )
    return ()


def _tag_schemas(tag: Any) -> list[tuple[str, dict[str, Any], str, EngineCapabilities]]:
    """Each JSON schema in a structural tag: its pointer, the object and key that hold it,
    and what xgrammar enforces there."""
    if isinstance(tag, dict) and isinstance(tag.get("structures"), list):
        return [
            (join_pointer("", "structures", index, "schema"), item, "schema", XGRAMMAR)
            for index, item in enumerate(tag["structures"])
            if isinstance(item, dict) and "schema" in item
        ]
    found = []
    pending: list[tuple[Any, str]] = [(tag, "")]
    while pending:
        node, pointer = pending.pop()
        if isinstance(node, list):
            children = [(item, f"{pointer}/{index}") for index, item in enumerate(node)]
            pending.extend(reversed(children))  # a stack: keep document order
            continue
        if not isinstance(node, dict):
            continue
        holds_schema = node.get("type") in _SCHEMA_FORMATS and "json_schema" in node
        if holds_schema:
            caps = XGRAMMAR
            if node.get("any_order"):  # presence of required keys is not checked
                caps = dataclasses.replace(caps, required=False)
            if node.get("excludes"):  # minLength/maxLength are dropped
                caps = dataclasses.replace(caps, string_lengths=False)
            found.append((f"{pointer}/json_schema", node, "json_schema", caps))
        pending.extend(
            reversed(
                [
                    (value, join_pointer(pointer, key))
                    for key, value in node.items()
                    if not (holds_schema and key == "json_schema")
                ]
            )
        )
    return found


def _json_schema(spec: GrammarSpec, schema: str) -> xgr.Grammar:
    compact = not spec.options.any_whitespace
    grammar = xgr.Grammar.from_json_schema(
        schema,
        any_whitespace=spec.options.any_whitespace,
        separators=_COMPACT_SEPARATORS if compact else None,
    )
    return bounded_strings_as_json(grammar)


def bounded_strings_as_json(grammar: xgr.Grammar) -> xgr.Grammar:
    """``grammar`` with raw control characters kept out of length-bounded strings.

    The grammar is printed, its bounded-string classes replaced, and the
    text parsed back. xgrammar's printed EBNF parses back to the same rules
    and expressions (checked by the round-trip tests), so nothing else of
    the grammar changes. A grammar without such a class is returned as it is.
    """
    text = str(grammar)
    if _BOUNDED_STRING_CHARACTER not in text:
        return grammar
    rewritten = EBNF_LITERAL_OR_CLASS.sub(_json_string_class, text)
    if rewritten == text:  # the class text was only inside a literal
        return grammar
    try:
        return xgr.Grammar.from_ebnf(rewritten, root_rule_name="root")
    except Exception as exc:  # native code reports every failure as RuntimeError
        # The schema itself is valid; refusing it for our own step would turn
        # a hardening into an outage. Serve what xgrammar built, and say so.
        logger.warning(
            "grammar-guard: could not keep control characters out of a bounded "
            "string (%s); compiling the schema's grammar unchanged",
            native_reason(exc),
        )
        return grammar


def _json_string_class(match: re.Match[str]) -> str:
    found = match.group()
    return _JSON_STRING_CHARACTER if found == _BOUNDED_STRING_CHARACTER else found


def _grammar(spec: GrammarSpec, text: str) -> xgr.Grammar:
    if grammar_is_lark(text):
        return xgr.Grammar.from_lark(text)
    return xgr.Grammar.from_ebnf(text)


def _structural_tag(spec: GrammarSpec, text: str) -> xgr.Grammar:
    tag = json.loads(text)
    if "structures" in tag:
        tag = _legacy_tag_as_triggered_tags(tag)
    if not spec.options.any_whitespace:
        _bound_json_whitespace(tag)
    return xgr.Grammar.from_structural_tag(json.dumps(tag))


def _legacy_tag_as_triggered_tags(tag: dict[str, Any]) -> dict[str, Any]:
    """The older form vLLM still accepts, ``{"structures": [...], "triggers": [...]}``.

    It means free text in which each trigger opens one of the tags, which is
    what a ``triggered_tags`` format says in the current form.
    """
    try:
        tags = [
            {
                "type": "tag",
                "begin": item["begin"],
                "content": {"type": "json_schema", "json_schema": item["schema"]},
                "end": item["end"],
            }
            for item in tag["structures"]
        ]
        triggers = list(tag["triggers"])
    except (KeyError, TypeError) as exc:
        raise InvalidGrammarError(
            "structural_tag with 'structures' needs 'triggers' and, per structure, "
            f"'begin', 'schema' and 'end' (missing {exc})"
        ) from exc
    return {
        "type": "structural_tag",
        "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags},
    }


def _bound_json_whitespace(node: Any) -> None:
    """Give JSON contents of a structural tag the server's compact-JSON setting.

    xgrammar has no zero-whitespace mode inside structural tags; one
    whitespace character at a time is its tightest bound, and it stops a weak
    model from filling a tool call with whitespace. A bound the client set
    itself is kept.
    """
    if isinstance(node, list):
        for item in node:
            _bound_json_whitespace(item)
        return
    if not isinstance(node, dict):
        return
    is_json_content = node.get("type") == "json_schema" and node.get("style", "json") == "json"
    if is_json_content and node.get("max_whitespace_cnt") is None:  # vLLM sends explicit nulls
        node["max_whitespace_cnt"] = 1
    for key, value in node.items():
        if key != "json_schema":  # a schema, not a format: leave it as written
            _bound_json_whitespace(value)


# Each takes the spec and the text xgrammar is given for it (_enforced_text).
_PARSERS: dict[RequestKind, Callable[[GrammarSpec, str], xgr.Grammar]] = {
    RequestKind.JSON_SCHEMA: _json_schema,
    RequestKind.JSON_OBJECT: lambda spec, _: _json_schema(spec, _ANY_OBJECT_SCHEMA),
    RequestKind.REGEX: lambda _, text: xgr.Grammar.from_regex(text),
    RequestKind.CHOICE: lambda _, text: xgr.Grammar.from_ebnf(choice_as_ebnf(json.loads(text))),
    RequestKind.GRAMMAR: _grammar,
    RequestKind.STRUCTURAL_TAG: _structural_tag,
}
