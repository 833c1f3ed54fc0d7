"""The xgrammar implementation of :mod:`grammar_guard.core.engine`.

This is the only module that touches xgrammar types. ``check`` and
``compile`` share one parse step, so a grammar the API process accepted is
exactly the grammar the engine compiles.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import xgrammar as xgr

from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.schema_analysis import EngineCapabilities, Finding, analyze, join_pointer
from grammar_guard.core.settings import UnenforcedPolicy
from grammar_guard.core.spec import GrammarSpec, RequestKind
from grammar_guard.core.xgrammar_capabilities import XGRAMMAR

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engine import TokenMatcher

# xgrammar prefixes native errors with "[hh:mm:ss] /path/file.cc:123: ".
_NATIVE_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")
# An EBNF rule definition: a rule name at the start of a line, then "::=".
_EBNF_RULE = re.compile(r"^\s*[A-Za-z_][\w.-]*\s*::=")
_GRAMMAR_COMMENT = re.compile(r"(#|//).*$")
# Compact JSON: xgrammar needs the separators as well as any_whitespace=False.
_COMPACT_SEPARATORS = (",", ":")
_ANY_OBJECT_SCHEMA = '{"type": "object"}'
# xgrammar 0.2.8 writes a character of a string with minLength or maxLength
# as this class, which lets raw control characters (tab, U+0001...) into the
# string: output that is not JSON. Strings without a length bound get the
# second class, which JSON allows; both are as xgrammar prints them.
_BOUNDED_STRING_CHARACTER = r"[^\"\\\r\n]"
_JSON_STRING_CHARACTER = r"[^\0-\x1f\"\\\r\n]"
# A quoted literal (a string, or a Regex("...") argument) or a character
# class of printed EBNF. Both are matched, not only classes, so that text
# inside a literal is never read as a class, nor a quote inside a class
# (printed \") as the start of a literal.
_EBNF_LITERAL_OR_CLASS = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]')
# Goes into the engine fingerprint: a grammar compiled before a rewrite
# existed must not be loaded from disk by an engine that applies it.
_GRAMMAR_REWRITES = "bounded-string-json-characters"

logger = logging.getLogger(__name__)


def _reason(exc: BaseException) -> str:
    first, *rest = str(exc).strip().splitlines() or [type(exc).__name__]
    return " ".join([_NATIVE_PREFIX.sub("", first), *rest]).strip()


def grammar_is_lark(text: str) -> bool:
    """EBNF (GBNF) rules are written ``name ::= ...``; anything else is read as Lark."""
    return not any(_EBNF_RULE.match(_GRAMMAR_COMMENT.sub("", line)) for line in text.splitlines())


def choice_as_ebnf(choices: Sequence[str]) -> str:
    # json.dumps yields a quoted literal whose escapes (\" \\ \n \uXXXX) are
    # the ones xgrammar's EBNF string syntax reads back.
    return "root ::= " + " | ".join(json.dumps(choice, ensure_ascii=False) for choice in choices)


@dataclass(frozen=True)
class XGrammarCompiled:
    compiled: xgr.CompiledGrammar

    @property
    def memory_bytes(self) -> int:
        return int(self.compiled.memory_size_bytes)

    @property
    def engine_name(self) -> str:
        return "xgrammar"


class XGrammarMatcher:
    __slots__ = ("_matcher",)

    def __init__(self, matcher: xgr.GrammarMatcher) -> None:
        self._matcher = matcher

    def accept_token(self, token_id: int) -> bool:
        return bool(self._matcher.accept_token(token_id))

    def rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self._matcher.fill_next_token_bitmask(bitmask, row)

    def is_terminated(self) -> bool:
        return bool(self._matcher.is_terminated())

    def reset(self) -> None:
        self._matcher.reset()

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        natives = [m._matcher for m in matchers if isinstance(m, XGrammarMatcher)]
        if len(natives) != len(matchers):
            raise TypeError("xgrammar can only batch-fill its own matchers")
        _batch_matcher(threads).batch_fill_next_token_bitmask(natives, bitmask, list(rows))


def _allows_a_first_token(compiled: xgr.CompiledGrammar) -> bool:
    """Whether a request under ``compiled`` can emit anything, even just its stop token.

    An unsatisfiable schema, regex or grammar compiles to a grammar whose
    first mask is empty: vLLM would sample a token the grammar then rejects
    and fail the request as a server error. Found here, it is the client's
    error, and cached as one.
    """
    matcher = xgr.GrammarMatcher(compiled)
    if matcher.is_terminated():
        return True
    bitmask = xgr.allocate_token_bitmask(1, compiled.tokenizer_info.vocab_size)
    matcher.fill_next_token_bitmask(bitmask)
    return bool(bitmask.any())


@functools.cache
def _batch_matcher(threads: int) -> xgr.BatchGrammarMatcher:
    # Reused: building one costs ~15 us, five times a cheap row's fill.
    return xgr.BatchGrammarMatcher(max_threads=threads)


@dataclass(frozen=True)
class XGrammarRecipe:
    """An :class:`XGrammarEngine` as picklable data, for compile processes."""

    tokenizer_json: str
    compile_threads: int
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE

    def build(self) -> XGrammarEngine:
        info = xgr.TokenizerInfo.deserialize_json(self.tokenizer_json)
        return XGrammarEngine(
            info, compile_threads=self.compile_threads, unenforced=self.unenforced
        )


class XGrammarEngine:
    def __init__(
        self,
        tokenizer_info: xgr.TokenizerInfo,
        *,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> None:
        self._tokenizer_info = tokenizer_info
        self._compile_threads = compile_threads
        # What compile does with a schema asking for constraints xgrammar
        # would not enforce (GRAMMAR_GUARD_UNENFORCED): refuse it, or compile it.
        self._unenforced = unenforced
        # Caching is ours (keyed by GrammarSpec); xgrammar's own cache would
        # hold a second, unbounded-by-us copy of every grammar.
        self._compiler = xgr.GrammarCompiler(
            tokenizer_info, max_threads=compile_threads, cache_enabled=False
        )

    @classmethod
    def for_hf_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int,
        *,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> XGrammarEngine:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        return cls(info, compile_threads=compile_threads, unenforced=unenforced)

    @classmethod
    def for_raw_vocab(
        cls,
        encoded_vocab: Sequence[str],
        *,
        byte_fallback: bool,
        stop_token_ids: Sequence[int],
        add_prefix_space: bool,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> XGrammarEngine:
        """For tokenizers that are not Hugging Face ones (Mistral's, for instance)."""
        info = xgr.TokenizerInfo(
            encoded_vocab=list(encoded_vocab),
            vocab_type=xgr.VocabType.BYTE_FALLBACK if byte_fallback else xgr.VocabType.RAW,
            vocab_size=len(encoded_vocab),
            stop_token_ids=list(stop_token_ids),
            add_prefix_space=add_prefix_space,
        )
        return cls(info, compile_threads=compile_threads, unenforced=unenforced)

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer_info.vocab_size)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end a grammar's output (xgrammar detects them if not told)."""
        return tuple(int(token) for token in self._tokenizer_info.stop_token_ids)

    @functools.cached_property
    def fingerprint(self) -> str:
        # The whole serialised vocabulary, not its size: two tokenizers of one
        # size can differ in every token. The library release stands in for
        # its serialisation format, which it does not expose on its own.
        digest = hashlib.sha256(self._tokenizer_json.encode())
        digest.update(importlib.metadata.version("xgrammar").encode())
        # A grammar compiled while unenforced keywords were let through must
        # not be served from disk to an engine that refuses them.
        digest.update(self._unenforced.value.encode())
        digest.update(_GRAMMAR_REWRITES.encode())
        return "xgrammar-" + digest.hexdigest()[:32]

    @functools.cached_property
    def _tokenizer_json(self) -> str:
        return str(self._tokenizer_info.serialize_json())

    def recipe(self) -> XGrammarRecipe:
        return XGrammarRecipe(self._tokenizer_json, self._compile_threads, self._unenforced)

    def serialize(self, compiled: XGrammarCompiled) -> bytes:  # type: ignore[override]
        return str(compiled.compiled.serialize_json()).encode()

    def deserialize(self, data: bytes) -> XGrammarCompiled:
        try:
            text = data.decode()
            compiled = xgr.CompiledGrammar.deserialize_json(text, self._tokenizer_info)
        # xgrammar reports every load failure as a RuntimeError subclass.
        except (UnicodeDecodeError, RuntimeError) as exc:
            raise ValueError(f"not a compiled grammar for this engine: {_reason(exc)}") from exc
        return XGrammarCompiled(compiled)

    @staticmethod
    def check(
        spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    ) -> tuple[Finding, ...]:
        """Parse ``spec``; raise :class:`InvalidGrammarError` if it is invalid.

        Also applies the unenforced-keyword policy: refuse raises
        :class:`UnenforcedKeywordError`, warn returns the findings (empty
        when xgrammar enforces the whole schema) for the caller to report.
        """
        return _parse_enforced(spec, unenforced)[1]

    def compile(self, spec: GrammarSpec) -> XGrammarCompiled:
        grammar, _ = _parse_enforced(spec, self._unenforced)
        try:
            compiled = self._compiler.compile_grammar(grammar)
        except Exception as exc:  # native code reports every failure as RuntimeError
            raise InvalidGrammarError(
                f"{spec.kind.value} failed to compile: {_reason(exc)}"
            ) from exc
        if not _allows_a_first_token(compiled):
            raise InvalidGrammarError(
                f"{spec.kind.value} allows no output at all: it is unsatisfiable, "
                "or needs characters no token of this model can write"
            )
        return XGrammarCompiled(compiled)

    def new_matcher(
        self,
        compiled: XGrammarCompiled,  # type: ignore[override]
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,
    ) -> XGrammarMatcher:
        return XGrammarMatcher(
            xgr.GrammarMatcher(
                compiled.compiled,
                override_stop_tokens=list(stop_token_ids) if stop_token_ids else None,
                max_rollback_tokens=max_rollback_tokens,
            )
        )


def _parse_enforced(
    spec: GrammarSpec, unenforced: UnenforcedPolicy
) -> tuple[xgr.Grammar, tuple[Finding, ...]]:
    """The parse step of ``check`` and ``compile``: the grammar, then the schema analysis."""
    grammar = _parse(spec)
    findings = unenforced_findings(spec)
    if findings and unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, findings)
    return grammar, findings


def unenforced_findings(spec: GrammarSpec) -> tuple[Finding, ...]:
    """The JSON-Schema keywords of ``spec`` that xgrammar would silently not enforce.

    For a JSON schema, and for every JSON schema inside a structural tag
    (located by pointers into the tag). ``json_object`` is ``{"type":
    "object"}``, which xgrammar enforces; other kinds have no schema.
    """
    if spec.kind is RequestKind.JSON_SCHEMA:
        return tuple(analyze(json.loads(spec.text), XGRAMMAR))
    if spec.kind is RequestKind.STRUCTURAL_TAG:
        return tuple(
            finding
            for pointer, schema, caps in _tag_schemas(json.loads(spec.text))
            for finding in analyze(schema, caps, base_pointer=pointer)
        )
    return ()


def _tag_schemas(tag: Any) -> list[tuple[str, Any, EngineCapabilities]]:
    """Each JSON schema in a structural tag, its pointer, and what xgrammar enforces there."""
    if isinstance(tag, dict) and isinstance(tag.get("structures"), list):
        return [
            (join_pointer("", "structures", index, "schema"), item["schema"], XGRAMMAR)
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
            found.append((f"{pointer}/json_schema", node["json_schema"], caps))
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


# Structural-tag formats whose "json_schema" is a JSON schema xgrammar compiles.
_SCHEMA_FORMATS = ("json_schema", "qwen_xml_parameter")


def _parse(spec: GrammarSpec) -> xgr.Grammar:
    try:
        return _PARSERS[spec.kind](spec)
    except InvalidGrammarError:
        raise
    except Exception as exc:
        raise InvalidGrammarError(f"invalid {spec.kind.value}: {_reason(exc)}") from exc


def _json_schema(spec: GrammarSpec, schema: str) -> xgr.Grammar:
    compact = not spec.options.any_whitespace
    grammar = xgr.Grammar.from_json_schema(
        schema,
        any_whitespace=spec.options.any_whitespace,
        separators=_COMPACT_SEPARATORS if compact else None,
    )
    return _bounded_strings_as_json(grammar)


def _bounded_strings_as_json(grammar: xgr.Grammar) -> xgr.Grammar:
    """``grammar`` with raw control characters kept out of length-bounded strings.

    The grammar is printed, its bounded-string classes replaced, and the
    text parsed back. xgrammar's printed EBNF parses back to the same rules
    and expressions (checked by the round-trip tests), so nothing else of
    the grammar changes. A grammar without such a class is returned as it is.
    """
    text = str(grammar)
    if _BOUNDED_STRING_CHARACTER not in text:
        return grammar
    rewritten = _EBNF_LITERAL_OR_CLASS.sub(_json_string_class, text)
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
            _reason(exc),
        )
        return grammar


def _json_string_class(match: re.Match[str]) -> str:
    found = match.group()
    return _JSON_STRING_CHARACTER if found == _BOUNDED_STRING_CHARACTER else found


def _grammar(spec: GrammarSpec) -> xgr.Grammar:
    if grammar_is_lark(spec.text):
        return xgr.Grammar.from_lark(spec.text)
    return xgr.Grammar.from_ebnf(spec.text)


def _structural_tag(spec: GrammarSpec) -> xgr.Grammar:
    tag = json.loads(spec.text)
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


_PARSERS = {
    RequestKind.JSON_SCHEMA: lambda spec: _json_schema(spec, spec.text),
    RequestKind.JSON_OBJECT: lambda spec: _json_schema(spec, _ANY_OBJECT_SCHEMA),
    RequestKind.REGEX: lambda spec: xgr.Grammar.from_regex(spec.text),
    RequestKind.CHOICE: lambda spec: xgr.Grammar.from_ebnf(choice_as_ebnf(json.loads(spec.text))),
    RequestKind.GRAMMAR: _grammar,
    RequestKind.STRUCTURAL_TAG: _structural_tag,
}
