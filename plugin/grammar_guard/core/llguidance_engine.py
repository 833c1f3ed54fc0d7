"""The llguidance implementation of :mod:`grammar_guard.core.engine`.

This is the only module that touches llguidance types. llguidance builds its
lexer lazily, so a "compile" is cheap (milliseconds where xgrammar may take
seconds); what is cached is a matcher at the start of the grammar, which each
request deep-copies. The JSON-Schema compiler is strict: a keyword it does
not implement, or a ``format`` it does not know, is an error, never a
silently dropped constraint; only the warn policy makes it lenient.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from copy import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.torch as llguidance_torch
import numpy as np

from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.listed_patterns import fold_listed_patterns
from grammar_guard.core.schema_analysis import (
    SCHEMA_LISTS,
    SCHEMA_MAPS,
    SCHEMA_VALUES,
    Finding,
    PatternSupport,
    join_pointer,
    pattern_problems,
    subschemas,
)
from grammar_guard.core.settings import UnenforcedPolicy
from grammar_guard.core.spec import GrammarSpec, RequestKind
from grammar_guard.core.xgrammar_engine import grammar_is_lark

if TYPE_CHECKING:
    import torch

    from grammar_guard.core.engine import TokenMatcher

# How llguidance's strict JSON compiler names what it would not enforce.
_UNIMPLEMENTED_KEYS = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (\S+)")
# llguidance logs grammar warnings itself at level 1; the reasons reach the
# client through our errors instead.
_SILENT = 0
# llguidance does not report a grammar's memory; this estimate errs high, so
# the cache bound holds. Measured on the 129k-token vocabulary, a compiled
# grammar with a started matcher: about 22 KiB for a 0.5 kB schema, 9 MiB for
# a 560 kB enum. The lexer states built while decoding are bounded by
# llguidance's own limits.
_BASE_BYTES = 32 * 1024
# Goes into the fingerprint: a grammar stored before a schema rewrite existed
# (listed_patterns.py) must not be loaded by an engine that applies it.
_GRAMMAR_REWRITES = "listed-pattern-properties-folded"
_BYTES_PER_GRAMMAR_CHAR = 16


class EngineDoesNotSupport(InvalidGrammarError):
    """This engine cannot take this kind of request at all (another engine may)."""


@dataclass(frozen=True)
class LLGuidanceCompiled:
    grammar: str
    # A matcher at the start of the grammar; requests get deep copies.
    start: llguidance.LLMatcher

    @property
    def memory_bytes(self) -> int:
        return _BASE_BYTES + len(self.grammar) * _BYTES_PER_GRAMMAR_CHAR

    @property
    def engine_name(self) -> str:
        return "llguidance"


class LLGuidanceMatcher:
    """One request's matcher, ending the way vLLM expects a grammar to end.

    The stop token is never fed to llguidance: it is the matcher's own
    decision, so that (as with xgrammar) the grammar is terminated only once
    a stop token was accepted, not as soon as llguidance sees its grammar
    complete, and so that a request's own stop tokens (vLLM passes them per
    request; llguidance knows only its tokenizer's) work alike.
    """

    __slots__ = ("_cleared", "_ended", "_ends", "_eos_ids", "_matcher")

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        *,
        stop_ids: frozenset[int],
        eos_ids: frozenset[int],
    ) -> None:
        self._matcher = matcher
        # The tokens that end this request's output.
        self._ends = stop_ids or eos_ids
        self._eos_ids = eos_ids
        # The tokenizer's stop tokens this request does not stop on: never allowed.
        self._cleared = tuple(eos_ids - self._ends)
        self._ended = False

    def accept_token(self, token_id: int) -> bool:
        if self._ended:
            return False
        if token_id in self._ends:
            if not self._may_end():
                return False
            self._ended = True
            return True
        if token_id in self._eos_ids:
            return False  # the request replaced the tokenizer's stop tokens
        # try_consume, not consume: a refused token leaves the matcher where
        # it was, as xgrammar's does (vLLM checks draft tokens this way), where
        # consume would put it in an error state for good.
        return self._matcher.try_consume_tokens([token_id]) == 1

    def rollback(self, num_tokens: int) -> None:
        if num_tokens <= 0:
            return
        if self._ended:
            self._ended = False
            num_tokens -= 1
        if num_tokens and not self._matcher.rollback(num_tokens):
            raise RuntimeError(f"llguidance could not roll back: {self._matcher.get_error()}")

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        llguidance_torch.fill_next_token_bitmask(self._matcher, bitmask, row)
        if self._ends != self._eos_ids:
            self._fix_stop_bits(_words(bitmask), row)

    def is_terminated(self) -> bool:
        return self._ended

    def reset(self) -> None:
        self._ended = False
        self._matcher.reset()

    @property
    def error(self) -> str:
        return str(self._matcher.get_error())

    def _may_end(self) -> bool:
        matcher = self._matcher
        return not matcher.is_error() and bool(matcher.is_accepting() or matcher.is_stopped())

    def _fix_stop_bits(self, words: np.ndarray, row: int) -> None:
        """Allow this request's own stop tokens where the grammar may end, and no other.

        llguidance allows its own EOS exactly where the grammar may end, so
        only a request with other stop tokens needs its row changed. Through
        a NumPy view: a bit set through torch indexing cost several
        microseconds, and vLLM gives every request its own stop tokens.
        """
        may_end = self._may_end()
        for token_id in self._cleared:
            _set_bit(words, row, token_id, False)
        for token_id in self._ends:
            _set_bit(words, row, token_id, may_end)

    @staticmethod
    def fill_batch(
        matchers: Sequence[TokenMatcher],
        bitmask: torch.Tensor,
        rows: Sequence[int],
        *,
        threads: int,
    ) -> None:
        own = [m for m in matchers if isinstance(m, LLGuidanceMatcher)]
        if len(own) != len(matchers):
            raise TypeError("llguidance can only batch-fill its own matchers")
        llguidance_torch.fill_next_token_bitmask_par(
            _executor(threads),
            [(m._matcher, row) for m, row in zip(own, rows, strict=True)],
            bitmask,
        )
        fixed = [(m, row) for m, row in zip(own, rows, strict=True) if m._ends != m._eos_ids]
        if fixed:
            words = _words(bitmask)
            for matcher, row in fixed:
                matcher._fix_stop_bits(words, row)


def _words(bitmask: torch.Tensor) -> np.ndarray:
    """The bitmask's words as unsigned integers, sharing its memory (a CPU tensor)."""
    return bitmask.numpy().view(np.uint32)


def _set_bit(words: np.ndarray, row: int, token_id: int, allowed: bool) -> None:
    word, bit = divmod(token_id, 32)
    if word >= words.shape[1]:
        return
    if allowed:
        words[row, word] |= np.uint32(1 << bit)
    else:
        words[row, word] &= np.uint32(~(1 << bit) & 0xFFFFFFFF)


@functools.cache
def _executor(threads: int) -> llguidance.LLExecutor:
    return llguidance.LLExecutor(num_threads=threads)


@dataclass(frozen=True)
class LLGuidanceRecipe:
    """An :class:`LLGuidanceEngine` as picklable data, for compile processes."""

    tokenizer_json: str
    vocab_size: int
    eos_token_ids: tuple[int, ...]
    unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE

    def build(self) -> LLGuidanceEngine:
        # The tokenizer (about 1.5 s and tens of MiB for a 129k vocabulary) is
        # built on first use: a compile process that routing never sends an
        # llguidance compile to never pays for it.
        return LLGuidanceEngine(recipe=self, unenforced=self.unenforced)

    def tokenizer(self) -> llguidance.LLTokenizer:
        return llguidance.LLTokenizer(
            self.tokenizer_json, n_vocab=self.vocab_size, eos_token=list(self.eos_token_ids)
        )


class LLGuidanceEngine:
    """Built from a tokenizer object (tests, special vocabularies) or from a recipe."""

    def __init__(
        self,
        tokenizer: llguidance.LLTokenizer | None = None,
        *,
        recipe: LLGuidanceRecipe | None = None,
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> None:
        if tokenizer is None and recipe is None:
            raise TypeError("an llguidance engine needs a tokenizer or a recipe")
        self._given_tokenizer = tokenizer
        self._recipe = recipe
        self._unenforced = unenforced

    @functools.cached_property
    def _tokenizer(self) -> llguidance.LLTokenizer:
        if self._given_tokenizer is not None:
            return self._given_tokenizer
        assert self._recipe is not None
        return self._recipe.tokenizer()

    @classmethod
    def for_hf_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int,
        *,
        stop_token_ids: Sequence[int],
        special_token_ids: Collection[int] = (),
        unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE,
    ) -> LLGuidanceEngine:
        """For a fast Hugging Face tokenizer, the only kind llguidance reads.

        ``stop_token_ids`` end a grammar's output when a request names none of
        its own; given, not read from the tokenizer, so that both engines stop
        on the same tokens (a bare tokenizer file often names no EOS at all).
        ``special_token_ids`` are the tokens the other engine keeps out of
        grammar text; llguidance keeps out those its tokenizer reads as
        special, and refuses to serve (ValueError) if that leaves one in.
        """
        backend = copy(tokenizer.backend_tokenizer)  # a copy: padding settings are shared
        backend.no_padding()
        backend.no_truncation()
        recipe = LLGuidanceRecipe(
            backend.to_str(),
            max(vocab_size, len(tokenizer)),
            tuple(int(token) for token in stop_token_ids),
            unenforced,
        )
        engine = recipe.build()
        # Built now, in the process that serves: a tokenizer llguidance cannot
        # read fails the start-up, not the first request routed to it.
        engine.load_tokenizer()
        as_text = sorted(t for t in special_token_ids if not engine._tokenizer.is_special_token(t))
        if as_text:
            raise ValueError(
                f"llguidance reads {len(as_text)} of this tokenizer's special tokens as "
                f"text (ids {as_text[:5]}), so its grammars could produce them"
            )
        return engine

    def load_tokenizer(self) -> None:
        _ = self._tokenizer

    @property
    def vocab_size(self) -> int:
        if self._recipe is not None:
            return self._recipe.vocab_size
        return int(self._tokenizer.vocab_size)

    @functools.cached_property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self._identity.encode())
        digest.update(importlib.metadata.version("llguidance").encode())
        digest.update(self._unenforced.value.encode())
        digest.update(_GRAMMAR_REWRITES.encode())
        return "llguidance-" + digest.hexdigest()[:32]

    @functools.cached_property
    def _identity(self) -> str:
        if self._recipe is not None:
            return f"{self._recipe.tokenizer_json}\n{self._recipe.vocab_size}"
        # A tokenizer built in place (tests, raw vocabularies): its tokens are its identity.
        tokens = [self._tokenizer.decode_bytes([t]) for t in range(self.vocab_size)]
        return json.dumps([token.hex() for token in tokens])

    def recipe(self) -> LLGuidanceRecipe:
        if self._recipe is None:
            raise TypeError("this llguidance engine was built from a tokenizer object")
        return self._recipe

    def serialize(self, compiled: LLGuidanceCompiled) -> bytes:  # type: ignore[override]
        return compiled.grammar.encode()

    def deserialize(self, data: bytes) -> LLGuidanceCompiled:
        try:
            grammar = data.decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"not an llguidance grammar: {exc}") from exc
        try:
            return self._start(grammar, "stored grammar")
        except InvalidGrammarError as exc:
            raise ValueError(f"not a grammar for this engine: {exc.reason}") from exc

    @staticmethod
    def check(
        spec: GrammarSpec, *, unenforced: UnenforcedPolicy = UnenforcedPolicy.REFUSE
    ) -> tuple[Finding, ...]:
        """Parse ``spec`` without a tokenizer; raise :class:`InvalidGrammarError` if invalid."""
        return _validated(spec, unenforced)[1]

    def compile(self, spec: GrammarSpec) -> LLGuidanceCompiled:
        grammar, _ = _validated(spec, self._unenforced)
        compiled = self._start(grammar, spec.kind.value)
        if not self._allows_a_first_token(compiled):
            raise InvalidGrammarError(
                f"{spec.kind.value} allows no output at all: it is unsatisfiable, "
                "or needs characters no token of this model can write"
            )
        return compiled

    def new_matcher(
        self,
        compiled: LLGuidanceCompiled,  # type: ignore[override]
        *,
        stop_token_ids: Collection[int] | None,
        max_rollback_tokens: int,  # llguidance keeps its whole history
    ) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(
            compiled.start.deep_copy(),
            stop_ids=frozenset(stop_token_ids or ()),
            eos_ids=frozenset(self._tokenizer.eos_tokens),
        )

    def _start(self, grammar: str, what: str) -> LLGuidanceCompiled:
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=_SILENT)
        if matcher.is_error():
            raise InvalidGrammarError(f"{what} failed to compile: {matcher.get_error()}")
        return LLGuidanceCompiled(grammar, matcher)

    def _allows_a_first_token(self, compiled: LLGuidanceCompiled) -> bool:
        matcher = compiled.start.deep_copy()
        if matcher.is_stopped():
            return True
        bitmask = llguidance_torch.allocate_token_bitmask(1, self.vocab_size)
        llguidance_torch.fill_next_token_bitmask(matcher, bitmask, 0)
        return bool(bitmask.any()) and not matcher.is_error()


def _validated(spec: GrammarSpec, unenforced: UnenforcedPolicy) -> tuple[str, tuple[Finding, ...]]:
    """The grammar llguidance compiles for ``spec``, and what it leaves unenforced."""
    inexact = _loosened_constraints(spec)
    if inexact and unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, inexact)
    grammar = _grammar(spec, lenient=False)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if not is_error:
        return grammar, inexact
    reason = messages[0] if messages else "invalid grammar"
    findings = _unenforced_findings(reason)
    if not findings:
        raise InvalidGrammarError(f"invalid {spec.kind.value}: {reason}")
    if unenforced is UnenforcedPolicy.REFUSE:
        raise UnenforcedKeywordError(spec.kind.value, findings)
    grammar = _grammar(spec, lenient=True)
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise InvalidGrammarError(f"invalid {spec.kind.value}: {messages[0]}")
    return grammar, inexact + findings


def _loosened_constraints(spec: GrammarSpec) -> tuple[Finding, ...]:
    """The formats and patterns llguidance accepts but writes looser than JSON Schema means."""
    if spec.kind is not RequestKind.JSON_SCHEMA:
        return ()
    found: list[Finding] = []
    pending: list[tuple[Any, str]] = [(json.loads(spec.text), "")]
    while pending:
        node, pointer = pending.pop()
        if not isinstance(node, dict):
            continue
        found.extend(_loose_format(node, pointer))
        found.extend(_loose_patterns(node, pointer))
        pending.extend(subschemas(node, pointer))
    return tuple(found)


def _loose_format(node: dict[str, Any], pointer: str) -> Iterator[Finding]:
    value = node.get("format")
    if isinstance(value, str) and value in _INEXACT_FORMATS:
        reason = f"llguidance accepts some invalid values: {_INEXACT_FORMATS[value]}"
        yield Finding("format", join_pointer(pointer, "format"), value, reason)


def _loose_patterns(node: dict[str, Any], pointer: str) -> Iterator[Finding]:
    pattern = node.get("pattern")
    if isinstance(pattern, str) and (problems := pattern_problems(pattern, _PATTERNS)):
        yield Finding("pattern", join_pointer(pointer, "pattern"), None, "; ".join(problems))
    names = node.get("patternProperties")
    for name in names if isinstance(names, dict) else ():
        if problems := pattern_problems(name, _PATTERNS):
            where = join_pointer(pointer, "patternProperties", name)
            yield Finding("patternProperties", where, None, "; ".join(problems))


def _unenforced_findings(reason: str) -> tuple[Finding, ...]:
    # llguidance names the keywords but not where they are.
    keys = _UNIMPLEMENTED_KEYS.search(reason)
    if keys:
        names = json.loads(f"[{keys.group(1)}]")
        return tuple(
            Finding(str(name), "", reason="llguidance does not implement it") for name in names
        )
    unknown = _UNKNOWN_FORMAT.search(reason)
    if unknown:
        return (Finding("format", "", unknown.group(1), "llguidance does not know this format"),)
    return ()


def _grammar(spec: GrammarSpec, *, lenient: bool) -> str:
    try:
        return _BUILDERS[spec.kind](spec, lenient)
    except InvalidGrammarError:
        raise
    except Exception as exc:  # the converters raise ValueError and friends
        raise InvalidGrammarError(f"invalid {spec.kind.value}: {exc}") from exc


def _json_schema(schema: str, spec: GrammarSpec, lenient: bool) -> str:
    closed = closed_like_xgrammar(json.loads(schema))
    fold_listed_patterns(closed)  # after closing: an allOf it adds would leave members open
    options: dict[str, Any] = {
        "whitespace_flexible": spec.options.any_whitespace,
        "item_separator": ",",
        "key_separator": ":",
        "lenient": lenient,
    }
    return str(llguidance.LLMatcher.grammar_from_json_schema(json.dumps(closed), overrides=options))


def closed_like_xgrammar(schema: Any) -> Any:
    """``schema`` with objects and tuples closed where xgrammar's strict mode closes them.

    xgrammar (as grammar-guard runs it) allows no property beyond those an
    object schema lists, and no item beyond a tuple's ``prefixItems``, unless
    the schema says otherwise; llguidance follows JSON Schema and allows
    them. Closed the same way, a request gets the same output language
    whichever engine serves it, and a weak model cannot pad an object with
    invented keys. The members of an ``allOf``, and a schema next to one,
    are left open: closing them would forbid the properties the other
    members add.
    """
    return _closed(schema, in_all_of=False)


def _closed(node: Any, *, in_all_of: bool) -> Any:
    if not isinstance(node, dict):
        return node
    result = {key: _closed_child(key, value) for key, value in node.items()}
    if not in_all_of and "allOf" not in node:
        if "properties" in node and not _OPENING_OBJECT_KEYWORDS & node.keys():
            result["additionalProperties"] = False
        if "prefixItems" in node and not _OPENING_ARRAY_KEYWORDS & node.keys():
            result["items"] = False
    return result


def _closed_child(keyword: str, value: Any) -> Any:
    if keyword in SCHEMA_MAPS and isinstance(value, dict):
        return {name: _closed(item, in_all_of=False) for name, item in value.items()}
    if keyword in SCHEMA_LISTS and isinstance(value, list):
        in_all_of = keyword == "allOf"
        return [_closed(item, in_all_of=in_all_of) for item in value]
    if keyword in SCHEMA_VALUES:
        return _closed(value, in_all_of=False)
    return value  # a value (enum, const, default...), not a schema


# Formats llguidance 1.7 accepts values of that the format forbids, found by
# the JSON-Schema-Test-Suite (benchmarks/coverage): refused like the keywords
# it does not implement, so that no constraint is silently loosened.
_INEXACT_FORMATS = {
    "date": "February 29 of years that are not leap years",
    "date-time": "leap seconds at any minute",
    "time": "leap seconds at any minute",
    "hostname": "names longer than 255 characters",
}
# What llguidance's ECMA-262 patterns get right: JSON escapes are written as
# escapes, and it refuses lookarounds and inner anchors itself; but its \s
# is Rust's, which leaves out U+FEFF, so \S lets the BOM through.
_PATTERNS = PatternSupport(
    lookaround=True,
    inner_anchors=True,
    unicode_whitespace=False,
    escapes_json_specials=True,
)
_OPENING_OBJECT_KEYWORDS = {"additionalProperties", "patternProperties", "unevaluatedProperties"}
_OPENING_ARRAY_KEYWORDS = {"items", "additionalItems", "unevaluatedItems"}


def _regex(regex: str) -> str:
    # ASCII \d and \w, as xgrammar reads them: a request means the same
    # whichever engine serves it.
    return str(
        llguidance.LLMatcher.grammar_from_lark(f"start: /{llguidance.regex_to_lark(regex, 'dw')}/")
    )


def _lark_or_gbnf(spec: GrammarSpec, lenient: bool) -> str:
    kind = "lark" if grammar_is_lark(spec.text) else "gbnf"
    return llguidance.grammar_from(kind, spec.text)


def _not_supported(spec: GrammarSpec, lenient: bool) -> str:
    raise EngineDoesNotSupport(f"llguidance does not take {spec.kind.value} requests here")


_BUILDERS: dict[RequestKind, Callable[[GrammarSpec, bool], str]] = {
    RequestKind.JSON_SCHEMA: lambda spec, lenient: _json_schema(spec.text, spec, lenient),
    RequestKind.JSON_OBJECT: lambda spec, lenient: _json_schema('{"type":"object"}', spec, lenient),
    RequestKind.REGEX: lambda spec, lenient: _regex(spec.text),
    RequestKind.CHOICE: lambda spec, lenient: llguidance.grammar_from("choice", spec.text),
    RequestKind.GRAMMAR: _lark_or_gbnf,
    # Structural tags stay with xgrammar, which implements vLLM's whole format.
    RequestKind.STRUCTURAL_TAG: _not_supported,
}
