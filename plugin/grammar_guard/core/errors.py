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
