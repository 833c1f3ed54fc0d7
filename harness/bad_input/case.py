"""One case of the bad-input corpus: the request it sends and the answer it expects.

A case is judged by the class of its reply (see :class:`Outcome`), read the
same way from a plain, a chat or a streamed response, and, for an accepted
input, by a checker of the output that does not go through the backend
under test.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from harness.oracles import assert_valid_prefix
from harness.server import GRAMMAR_GUARD_FLAGS

# The server the expectations are written for: grammar-guard with compact JSON
# and a tool parser, so that tool_choice puts tool schemas into the grammar.
SERVER_ARGS = (*GRAMMAR_GUARD_FLAGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
# A refusal names its reason in a few hundred characters; it must never echo
# a large input back. vLLM's own multi-error messages reach about 2 KB.
MAX_ERROR_BODY_BYTES = 4096
TIMEOUT_REASON = "grammar compile timed out (2 s limit)"


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
