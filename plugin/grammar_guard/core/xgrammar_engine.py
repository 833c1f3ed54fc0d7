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
import threading
from collections import OrderedDict
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
# Goes into the fingerprint with the special tokens themselves: how they are
# kept out of grammar text, and when a grammar gets some of them back.
_SPECIAL_TOKEN_RULE = "special-tokens-only-where-named"
# Vocabularies that let some special tokens back in, one per set of tokens
# grammars name: a model's tool-call tags name the same few every time.
_NAMING_VOCABULARIES = 4
# A token element of printed EBNF, Token(5) or Token(5, 6): Lark's <[5]>.
_TOKEN_ELEMENT = re.compile(r"\bToken\(([\d,\s]+)\)")
# Structural-tag fields that hold no text the tag writes out: schemas (their
# strings are content) and what must not appear.
_NOT_WRITTEN = frozenset({"json_schema", "schema", "excludes", "exclude_tokens"})

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


def hf_special_token_ids(tokenizer: Any) -> frozenset[int]:
    """The control tokens of a Hugging Face tokenizer, which grammar text must never hold.

    Its added tokens marked special, the special tokens it names (EOS, BOS,
    padding...), and added tokens written as a tag (``<think>``, DeepSeek's
    chat-role and tool-call tokens) whether marked special or not:
    llguidance reads those as special too, and a request must get the same
    tokens whichever engine serves it.
    """
    added = tokenizer.added_tokens_decoder  # id -> AddedToken
    control = {
        int(token_id)
        for token_id, token in added.items()
        if token.special or (token.content.startswith("<") and token.content.endswith(">"))
    }
    return frozenset(control.union(int(token_id) for token_id in tokenizer.all_special_ids))


@dataclass(frozen=True)
class XGrammarCompiled:
    compiled: xgr.CompiledGrammar
    # The special tokens its grammar names, which the vocabulary it was
    # compiled (and must be loaded) against lets back in.
    named_tokens: frozenset[int] = frozenset()

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
    special_token_ids: tuple[int, ...] = ()

    def build(self) -> XGrammarEngine:
        info = xgr.TokenizerInfo.deserialize_json(self.tokenizer_json)
        return XGrammarEngine(
            info,
            compile_threads=self.compile_threads,
            unenforced=self.unenforced,
            special_token_ids=self.special_token_ids,
        )


@dataclass(frozen=True)
class _Vocabulary:
    info: xgr.TokenizerInfo
    compiler: xgr.GrammarCompiler


class XGrammarEngine:
    """Grammars over ``tokenizer_info``, with ``special_token_ids`` kept out of grammar text.

    xgrammar matches a special token's text like any other token's, so
    inside a JSON string a model could sample ``<|eot_id|>`` or a reserved
    placeholder (which vLLM then drops from the output). Grammars are
    therefore compiled against the vocabulary with those tokens blank, which
    xgrammar never lets into text. A grammar that names some of them (a
    token element, or a structural tag that writes a tool-call token out)
    gets a vocabulary where those keep their text. Stop tokens need no text:
    xgrammar allows them wherever the grammar may end.
    """

    def __init__(
        self,
        tokenizer_info: xgr.TokenizerInfo,
        *,
        compile_threads: int,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
        special_token_ids: Collection[int] = (),
    ) -> None:
        # The tokenizer's own vocabulary, special tokens' texts included.
        self._tokenizer_info = tokenizer_info
        self._compile_threads = compile_threads
        # What compile does with a schema asking for constraints xgrammar
        # would not enforce (GRAMMAR_GUARD_UNENFORCED): refuse it, or compile it.
        self._unenforced = unenforced
        size = tokenizer_info.vocab_size
        self._special_ids = frozenset(t for t in map(int, special_token_ids) if 0 <= t < size)
        # The vocabularies are rebuilt from the decoded texts, as a raw
        # vocabulary (which xgrammar matches as it matches the encoded one).
        self._texts = (
            [bytes(text) for text in tokenizer_info.decoded_vocab] if self._special_ids else []
        )
        # An empty text names nothing: xgrammar already treats that token as special.
        self._special_texts = {
            token: text.decode(errors="replace")
            for token in self._special_ids
            if (text := self._texts[token])
        }
        self._naming: OrderedDict[frozenset[int], _Vocabulary] = OrderedDict()
        self._naming_lock = threading.Lock()
        self._vocabulary = self._new_vocabulary(frozenset())

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
        return cls(
            info,
            compile_threads=compile_threads,
            unenforced=unenforced,
            special_token_ids=hf_special_token_ids(tokenizer),
        )

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
        special_token_ids: Collection[int] = (),
    ) -> XGrammarEngine:
        """For tokenizers that are not Hugging Face ones (Mistral's, for instance)."""
        info = xgr.TokenizerInfo(
            encoded_vocab=list(encoded_vocab),
            vocab_type=xgr.VocabType.BYTE_FALLBACK if byte_fallback else xgr.VocabType.RAW,
            vocab_size=len(encoded_vocab),
            stop_token_ids=list(stop_token_ids),
            add_prefix_space=add_prefix_space,
        )
        return cls(
            info,
            compile_threads=compile_threads,
            unenforced=unenforced,
            special_token_ids=special_token_ids,
        )

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer_info.vocab_size)

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The tokens that end a grammar's output (xgrammar detects them if not told)."""
        return tuple(int(token) for token in self._tokenizer_info.stop_token_ids)

    @property
    def special_token_ids(self) -> frozenset[int]:
        """The special and control tokens kept out of grammar text."""
        return self._special_ids

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
        # Which tokens grammar text leaves out changes every compiled mask.
        digest.update(f"{_SPECIAL_TOKEN_RULE}:{sorted(self._special_ids)}".encode())
        return "xgrammar-" + digest.hexdigest()[:32]

    @functools.cached_property
    def _tokenizer_json(self) -> str:
        return str(self._tokenizer_info.serialize_json())

    def recipe(self) -> XGrammarRecipe:
        return XGrammarRecipe(
            self._tokenizer_json,
            self._compile_threads,
            self._unenforced,
            tuple(sorted(self._special_ids)),
        )

    def serialize(self, compiled: XGrammarCompiled) -> bytes:  # type: ignore[override]
        # The named tokens first: xgrammar loads a grammar into any vocabulary
        # of its size, so the one it was compiled against must be recorded.
        named = " ".join(str(token) for token in sorted(compiled.named_tokens))
        return f"{named}\n{compiled.compiled.serialize_json()}".encode()

    def deserialize(self, data: bytes) -> XGrammarCompiled:
        try:
            named_line, newline, text = data.decode().partition("\n")
            named = frozenset(int(token) for token in named_line.split())
            if not newline or not named <= self._special_ids:
                raise ValueError("its first line names no vocabulary of this engine")
            info = self._naming_vocabulary(named).info
            compiled = xgr.CompiledGrammar.deserialize_json(text, info)
        # xgrammar reports every load failure as a RuntimeError subclass;
        # bad text or a bad first line raise ValueError (UnicodeDecodeError is one).
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"not a compiled grammar for this engine: {_reason(exc)}") from exc
        return XGrammarCompiled(compiled, named)

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
        named = self._named_tokens(spec, grammar)
        try:
            compiled = self._naming_vocabulary(named).compiler.compile_grammar(grammar)
        except Exception as exc:  # native code reports every failure as RuntimeError
            raise InvalidGrammarError(
                f"{spec.kind.value} failed to compile: {_reason(exc)}"
            ) from exc
        if not _allows_a_first_token(compiled):
            raise InvalidGrammarError(
                f"{spec.kind.value} allows no output at all: it is unsatisfiable, "
                "or needs characters no token of this model can write"
            )
        return XGrammarCompiled(compiled, named)

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

    def _named_tokens(self, spec: GrammarSpec, grammar: xgr.Grammar) -> frozenset[int]:
        """The special tokens ``spec`` names, which its grammar may then produce.

        A grammar names a token by id (a token element); a structural tag
        also by writing its text out, as the tool-call tags of vLLM's parsers
        and xgrammar's model templates write ``<|python_tag|>`` or
        ``<|channel|>``. Such a token is then allowed wherever its text is,
        the tag's contents included; every other special token stays out.
        """
        if not self._special_ids or spec.kind not in _NAMING_KINDS:
            return frozenset()
        printed = _EBNF_LITERAL_OR_CLASS.sub("", str(grammar))
        named = {int(t) for ids in _TOKEN_ELEMENT.findall(printed) for t in ids.split(",")}
        if spec.kind is RequestKind.STRUCTURAL_TAG:
            ids, texts = _tag_tokens(json.loads(spec.text))
            written = "\0".join(texts)
            named.update(ids)
            named.update(token for token, text in self._special_texts.items() if text in written)
        return frozenset(named & self._special_ids)

    def _naming_vocabulary(self, named: frozenset[int]) -> _Vocabulary:
        if not named:
            return self._vocabulary
        with self._naming_lock:
            vocabulary = self._naming.pop(named, None) or self._new_vocabulary(named)
            self._naming[named] = vocabulary
            if len(self._naming) > _NAMING_VOCABULARIES:
                self._naming.popitem(last=False)  # its grammars keep their own reference
            return vocabulary

    def _new_vocabulary(self, named: frozenset[int]) -> _Vocabulary:
        info = self._tokenizer_info
        if self._special_ids:
            blank = self._special_ids - named
            info = xgr.TokenizerInfo(
                [b"" if token in blank else text for token, text in enumerate(self._texts)],
                xgr.VocabType.RAW,
                vocab_size=info.vocab_size,
                stop_token_ids=list(info.stop_token_ids),
                add_prefix_space=info.add_prefix_space,
            )
        # Caching is ours (keyed by GrammarSpec); xgrammar's own cache would
        # hold a second, unbounded-by-us copy of every grammar.
        compiler = xgr.GrammarCompiler(info, max_threads=self._compile_threads, cache_enabled=False)
        return _Vocabulary(info, compiler)


# The kinds whose grammars can name tokens.
_NAMING_KINDS = (RequestKind.GRAMMAR, RequestKind.STRUCTURAL_TAG)


def _tag_tokens(tag: Any) -> tuple[set[int], list[str]]:
    """The token ids a structural tag names, and the texts it writes out."""
    ids: set[int] = set()
    texts: list[str] = []
    pending = [tag]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            refs = [node.get("token"), *(node.get("trigger_tokens") or ())]
            if node.get("type") == "token_dispatch":
                refs.extend(rule[0] for rule in node.get("rules") or () if rule)
            ids.update(r for r in refs if isinstance(r, int) and not isinstance(r, bool))
            pending.extend(value for key, value in node.items() if key not in _NOT_WRITTEN)
    return ids, texts


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
