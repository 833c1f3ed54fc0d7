"""How the corpus writes its cases: request bodies and the constructors of each kind of case.

A body is a function of the model name, built only when the case is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from harness.bad_input.case import (
    COMPLETIONS,
    TIMEOUT_REASON,
    Case,
    Check,
    Outcome,
    json_output,
    regex_output,
)


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


def lazy_completion(build: Callable[[], Any]) -> Callable[[str], bytes]:
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


def raw_body(make: Callable[[str], str | bytes]) -> Callable[[str], bytes]:
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


def schema_refused(name: str, schema: Any, reason: str) -> Case:
    return refused(name, completion({"json": schema}), reason)


def regex_refused(name: str, pattern: str, reason: str) -> Case:
    return refused(name, completion({"regex": pattern}), reason)


def grammar_refused(name: str, grammar: str, reason: str) -> Case:
    return refused(name, completion({"grammar": grammar}), reason)


def schema_constrained(name: str, schema: Any, *, max_tokens: int = 32) -> Case:
    return constrained(
        name, completion({"json": schema}, max_tokens=max_tokens), json_output(schema)
    )


def regex_constrained(name: str, pattern: str, language: str | None = None) -> Case:
    """``language``: a Python pattern for the same language, where ``re`` reads it differently."""
    return constrained(name, completion({"regex": pattern}), regex_output(language or pattern))


# The parameters of get_weather, the one tool the chat cases offer.
WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Oslo", "Lima", "Pune"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def function_tools(parameters: Any, *, name: Any = "get_weather", strict: bool = True) -> list[Any]:
    """A tools list of one function; vLLM puts its schema into the grammar only when strict."""
    return [
        {"type": "function", "function": {"name": name, "strict": strict, "parameters": parameters}}
    ]


NAMED_TOOL = {"type": "function", "function": {"name": "get_weather"}}
