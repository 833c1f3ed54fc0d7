"""Feed a JSON instance to a grammar as a model would write it: token by token.

At each step the grammar chooses among a few fixed texts of the same value (whitespace, key
order, a number's integer form, escaped strings), the first it accepts in full is fed, and the
stop token ends it; greedy, no backtracking. docs/coverage.md ("How an instance is written").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Protocol

from harness.schema_data.cases import NumberLiteral, RawText
from harness.schema_data.key_order import SchemaNavigator

if TYPE_CHECKING:
    import torch

_REQUEST_ID = "coverage"
_INDENT = "  "
# Integer forms are only offered for numbers of at most this many digits.
_MAX_INTEGER_DIGITS = 64
_ENCODE_CACHE = 1 << 16


class Grammar(Protocol):
    """What the writer needs of vLLM's ``StructuredOutputGrammar``."""

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool: ...

    def validate_tokens(self, tokens: list[int]) -> list[int]: ...

    def is_terminated(self) -> bool: ...

    def fill_bitmask(self, bitmask: torch.Tensor, idx: int) -> None: ...


@dataclass(frozen=True)
class Written:
    accepted: bool
    text: str
    refused_at: int | None  # offset of the first piece the grammar refused
    # The tokens the grammar accepted, in order, the stop token included if
    # it was: what a sampler under the grammar's mask would have picked.
    tokens: tuple[int, ...]


class Layout:
    """Whitespace candidates by position; ``depth`` is the nesting of what follows."""

    def __init__(self, *, whitespace: bool) -> None:
        self._whitespace = whitespace

    def before_member(self, depth: int) -> tuple[str, ...]:
        if self._whitespace:
            return ("\n" + _INDENT * depth, " ", "")
        return ("", " ")

    def after_colon(self) -> tuple[str, ...]:
        return (" ", "") if self._whitespace else ("", " ")

    def before_close(self, depth: int, *, empty: bool) -> tuple[str, ...]:
        if empty or not self._whitespace:
            return ("", " ")
        return ("\n" + _INDENT * depth, " ", "")


class InstanceWriter:
    def __init__(
        self,
        grammar: Grammar,
        encode: Callable[[str], Sequence[int]],
        stop_token: int,
        layout: Layout,
        schema: Any,  # the root schema of the instance
        bitmask: torch.Tensor,  # one row, for the mask that allows the stop token or not
        *,
        integer_forms: bool,
    ) -> None:
        self._grammar = grammar
        self._bitmask = bitmask
        self._integer_forms = integer_forms
        self._encode = encode
        self._stop_token = stop_token
        self._layout = layout
        self._schema = schema
        self._navigator = SchemaNavigator(schema)
        self._parts: list[str] = []
        self._length = 0
        self._refused_at: int | None = None
        self._tokens: list[int] = []

    def write(self, value: Any) -> Written:
        """Feed ``value`` and the stop token; a writer writes one instance."""
        if isinstance(value, RawText):
            self._emit((value.text,))
        else:
            self._value(value, self._schema, depth=0, lead=("",))
        if self._refused_at is None and not self._stop():
            self._refused_at = self._length
        text = "".join(self._parts)
        return Written(self._refused_at is None, text, self._refused_at, tuple(self._tokens))

    # -- JSON ---------------------------------------------------------------

    def _value(self, value: Any, schema: Any, depth: int, lead: Sequence[str]) -> None:
        if isinstance(value, dict):
            self._object(value, schema, depth, lead)
        elif isinstance(value, list):
            self._array(value, schema, depth, lead)
        else:
            self._emit(_joined(lead, self._scalar_texts(value)))

    def _object(self, value: dict[str, Any], schema: Any, depth: int, lead: Sequence[str]) -> None:
        self._emit(_joined(lead, ("{",)))
        keys = list(value)
        remaining = self._navigator.key_order(schema, keys)
        while remaining:
            if len(remaining) < len(keys):
                self._emit((",",))
            key = self._choose_key(remaining, self._layout.before_member(depth + 1))
            remaining.remove(key)
            subschema = self._navigator.property_schema(schema, key, keys)
            self._value(value[key], subschema, depth + 1, self._layout.after_colon())
        self._emit(_joined(self._layout.before_close(depth, empty=not keys), ("}",)))

    def _array(self, value: list[Any], schema: Any, depth: int, lead: Sequence[str]) -> None:
        self._emit(_joined(lead, ("[",)))
        for index, item in enumerate(value):
            if index:
                self._emit((",",))
            subschema = self._navigator.item_schema(schema, index)
            self._value(item, subschema, depth + 1, self._layout.before_member(depth + 1))
        self._emit(_joined(self._layout.before_close(depth, empty=not value), ("]",)))

    def _scalar_texts(self, value: Any) -> list[str]:
        if isinstance(value, NumberLiteral):
            return _number_texts(value.text, integer_form=self._integer_forms)
        if isinstance(value, str):
            return _string_texts(value)
        return [json.dumps(value)]  # true, false, null

    def _choose_key(self, keys: Sequence[str], lead: Sequence[str]) -> str:
        """The first key the grammar takes next; the first of all once it refused."""
        for key in keys:
            if self._offer(_joined(lead, [text + ":" for text in _string_texts(key)])):
                return key
        self._refuse(_joined(lead, [text + ":" for text in _string_texts(keys[0])])[0])
        return keys[0]

    # -- feeding the grammar ------------------------------------------------

    def _emit(self, candidates: Sequence[str]) -> None:
        if not self._offer(candidates):
            self._refuse(candidates[0])

    def _offer(self, candidates: Sequence[str]) -> bool:
        """Feed the first candidate the grammar accepts in full; after a refusal, the first."""
        if self._refused_at is not None:
            self._append(candidates[0])
            return True
        for candidate in candidates:
            tokens = list(self._encode(candidate))
            if len(self._grammar.validate_tokens(tokens)) == len(tokens):
                if self._grammar.accept_tokens(_REQUEST_ID, tokens):
                    self._append(candidate)
                    self._tokens += tokens
                else:  # validate and accept disagree: the grammar refused after all
                    self._refuse(candidate)
                return True
        return False

    def _refuse(self, text: str) -> None:
        self._refused_at = self._length
        self._append(text)

    def _append(self, text: str) -> None:
        self._parts.append(text)
        self._length += len(text)

    def _stop(self) -> bool:
        # The mask decides, not validate_tokens: vLLM's guidance grammar
        # validates nothing, the stop token included, once its matcher has
        # stopped (the value is complete and only the stop token may follow).
        # accept_tokens' answer is checked too: handed the stop token, that
        # grammar reports itself terminated whether it took it or not.
        self._grammar.fill_bitmask(self._bitmask, 0)
        if not _allows(self._bitmask, self._stop_token):
            return False
        if not self._grammar.accept_tokens(_REQUEST_ID, [self._stop_token]):
            return False
        self._tokens.append(self._stop_token)
        return self._grammar.is_terminated()


def token_encoder(tokenizer: Any) -> Callable[[str], tuple[int, ...]]:
    """The tokenizer's ids for a text, remembered: keys and values repeat across instances."""

    @functools.lru_cache(maxsize=_ENCODE_CACHE)
    def encode(text: str) -> tuple[int, ...]:
        # A key or string that spells a special token is still plain text.
        return tuple(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    return encode


def _allows(bitmask: torch.Tensor, token: int) -> bool:
    """Whether the mask's first row allows ``token`` (32 tokens a word, lowest bit first)."""
    word, bit = divmod(token, 32)
    return word < bitmask.shape[1] and bool((int(bitmask[0, word]) >> bit) & 1)


def _joined(lead: Sequence[str], texts: Sequence[str]) -> list[str]:
    """Every text after every whitespace, texts first (a value's own form matters more)."""
    return list(dict.fromkeys(space + text for text in texts for space in lead))


def _number_texts(literal: str, *, integer_form: bool) -> list[str]:
    texts = [literal]
    if not integer_form:
        return texts
    try:
        number = Decimal(literal)
    except InvalidOperation:
        return texts
    if (
        number.is_finite()
        and number.adjusted() < _MAX_INTEGER_DIGITS
        and number == number.to_integral_value()
    ):
        texts.append(str(int(number)))
    return list(dict.fromkeys(texts))


def _string_texts(value: str) -> list[str]:
    escaped = json.dumps(value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: only its escape is text a model can write
        return [escaped]
    return list(dict.fromkeys([json.dumps(value, ensure_ascii=False), escaped]))
