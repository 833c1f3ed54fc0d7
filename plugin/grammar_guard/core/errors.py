"""Errors a client can act on.

``InvalidGrammarError`` derives from ``ValueError`` so hosts that map
validation errors to a 400-class response (vLLM does) treat it as the
client's problem, not as a server fault.
"""

from __future__ import annotations

# Long reasons are cut so a rejected megabyte schema is never echoed back.
MAX_REASON_CHARS = 400


def shorten(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


class InvalidGrammarError(ValueError):
    """The request's grammar cannot be compiled; retrying will not help."""

    def __init__(self, reason: str) -> None:
        self.reason = shorten(reason)
        super().__init__(self.reason)


class CompileTimeoutError(TimeoutError):
    """The request's grammar did not compile within its time budget.

    ``permanent`` is True once the key has timed out more often than the
    retry budget allows: retrying will not help then. Otherwise
    ``retry_after_s`` says when a retry may be served (the compile goes on
    in the background and its result is cached).
    """

    def __init__(
        self, message: str, *, waited_s: float, permanent: bool, retry_after_s: float | None
    ) -> None:
        self.waited_s = waited_s
        self.permanent = permanent
        self.retry_after_s = retry_after_s
        super().__init__(message)
