"""What a request asks the grammar engine to enforce, and its cache key.

A :class:`GrammarSpec` is both the compile input and the cache key: it holds
the request kind, the grammar text in canonical form and every option that
changes the compiled result. JSON inputs are re-serialised compactly so that
the same document written with different whitespace maps to one key; object
member order is preserved because in a schema it is meaning (``properties``
order fixes the order the model must write).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.limits import check_json_depth, check_json_value, check_text

# The most strings a choice may list: enough for any real enumeration, few
# enough that judging, compiling and loading one stays a fraction of a second
# of CPU; a megabyte of strings took seconds, which a benign client of the
# attack test waited for on a small machine (docs/known-limitations.md).
MAX_CHOICES = 20_000

# A spec shorter than this is small: it is judged and compiled without a
# separate lane or worker when its plan says it is quick. Anything longer is
# never even parsed on the thread that admits it (validation lanes, compile
# lanes and upgrades all draw the line here).
SMALL_SPEC_CHARS = 16 * 1024


class RequestKind(enum.Enum):
    JSON_SCHEMA = "json_schema"
    JSON_OBJECT = "json_object"
    REGEX = "regex"
    CHOICE = "choice"
    GRAMMAR = "grammar"
    STRUCTURAL_TAG = "structural_tag"

    @property
    def takes_json_options(self) -> bool:
        return self in (
            RequestKind.JSON_SCHEMA,
            RequestKind.JSON_OBJECT,
            RequestKind.STRUCTURAL_TAG,
        )

    @property
    def text_is_json(self) -> bool:
        return self in (RequestKind.JSON_SCHEMA, RequestKind.CHOICE, RequestKind.STRUCTURAL_TAG)


@dataclass(frozen=True)
class CompileOptions:
    """Options that change a compiled JSON grammar (also JSON inside structural tags)."""

    # False: compact JSON only (no whitespace between tokens), which keeps a
    # weak model from padding its output with whitespace until max_tokens.
    any_whitespace: bool = True
    # True: an object or tuple takes the properties or items its schema does
    # not list, where the schema does not forbid them, as JSON Schema says;
    # False: only those it lists, as xgrammar's strict mode (docs/routing.md).
    # A server's keys are open unless it closes them (settings.objects_open);
    # a spec built without options is closed, as both engines are by themselves.
    open_objects: bool = False


_NEUTRAL_OPTIONS = CompileOptions()


@dataclass(frozen=True)
class GrammarSpec:
    kind: RequestKind
    text: str
    options: CompileOptions = _NEUTRAL_OPTIONS

    @classmethod
    def build(
        cls,
        kind: RequestKind,
        source: str | dict[str, Any] | list[Any] | bool | None,
        options: CompileOptions,
    ) -> GrammarSpec:
        """Validate the raw request input and put it in canonical form.

        Raises :class:`InvalidGrammarError` for input that is malformed or
        unsafe to hand to native code; nothing here compiles.
        """
        if kind is RequestKind.JSON_OBJECT:
            text = ""
        elif kind.text_is_json:
            text, document = _canonical_json(kind, source)
            if kind is RequestKind.CHOICE:
                _check_choices(document)
        elif isinstance(source, str):
            check_text(kind.value, source)
            text = source
        else:
            raise InvalidGrammarError(f"{kind.value} must be a string, got {type(source).__name__}")
        if kind is RequestKind.GRAMMAR and not text.strip():
            raise InvalidGrammarError("grammar must not be empty")
        return cls(kind, text, options if kind.takes_json_options else _NEUTRAL_OPTIONS)

    def describe(self) -> str:
        """A short label for logs that never includes the whole grammar."""
        return f"{self.kind.value}({len(self.text)} chars)"


def _canonical_json(
    kind: RequestKind, source: str | dict[str, Any] | list[Any] | bool | None
) -> tuple[str, Any]:
    """The compact text of a JSON input, and the parsed value it came from."""
    if isinstance(source, str):
        check_text(kind.value, source, json_text=kind is RequestKind.JSON_SCHEMA)
        if not source.strip():
            raise InvalidGrammarError(f"{kind.value} must not be empty")
        check_json_depth(kind.value, source)
        try:
            document = json.loads(source)
        except ValueError as exc:  # also Python's limit on integer digits
            raise InvalidGrammarError(f"{kind.value} is not valid JSON: {exc}") from exc
    elif isinstance(source, dict | list | bool):  # true and false are schemas too
        document = source
    else:
        raise InvalidGrammarError(
            f"{kind.value} must be JSON text or a JSON value, got {type(source).__name__}"
        )
    check_json_value(kind.value, document, controls_in_strings=kind is RequestKind.JSON_SCHEMA)
    try:
        text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidGrammarError(f"{kind.value} is not serialisable as JSON: {exc}") from exc
    # json.dumps escapes every control character but DEL, which can only be
    # in a string here: escaped too, the text holds none raw.
    text = text.replace("\x7f", "\\u007f")
    check_text(kind.value, text)  # the size limit, for values built by the caller
    if kind is RequestKind.JSON_SCHEMA and not isinstance(document, dict | bool):
        raise InvalidGrammarError(
            f"json_schema must be a JSON object or boolean, got {type(document).__name__}"
        )
    if kind is RequestKind.STRUCTURAL_TAG and not isinstance(document, dict):
        raise InvalidGrammarError("structural_tag must be a JSON object")
    return text, document


def _check_choices(choices: Any) -> None:
    if not isinstance(choices, list) or not choices:
        raise InvalidGrammarError("choice must be a non-empty list of strings")
    if len(choices) > MAX_CHOICES:
        raise InvalidGrammarError(
            f"choice lists {len(choices):,} strings, and may list {MAX_CHOICES:,} at most"
        )
    if not all(isinstance(choice, str) for choice in choices):
        raise InvalidGrammarError("every choice must be a string")
