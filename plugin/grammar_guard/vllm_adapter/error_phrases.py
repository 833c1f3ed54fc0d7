"""vLLM's own words at the start of a refusal, so that clients matching them keep working.

vLLM's built-in backends refuse a bad request with fixed phrases ("Invalid
grammar specification.", "The provided JSON schema contains features not
supported by xgrammar.") that clients and vLLM's own tests match. A
grammar-guard refusal starts with the phrase vLLM uses for the same kind of
request and failure, then gives the plugin's reason, which says what is
wrong and where.
"""

from __future__ import annotations

from grammar_guard import BACKEND_NAME
from grammar_guard.core.errors import InvalidGrammarError, UnenforcedKeywordError
from grammar_guard.core.request.spec import RequestKind

UNSUPPORTED_FEATURES = "The provided JSON schema contains features not supported by"
_PHRASES = {
    RequestKind.JSON_SCHEMA: "Failed to transform json schema into a grammar",
    RequestKind.JSON_OBJECT: "Failed to transform json schema into a grammar",
    RequestKind.REGEX: "Failed to transform regex into a grammar",
    RequestKind.CHOICE: "Failed to transform choices into a grammar",
    RequestKind.GRAMMAR: "Invalid grammar specification",
    RequestKind.STRUCTURAL_TAG: "Invalid structural tag specification",
}
# When the request's kind is not known: it named no usable constraint.
_UNKNOWN_KIND = "Invalid structured output request"


def refusal_message(kind: RequestKind | None, error: InvalidGrammarError) -> str:
    """The 400 message for ``error``, refusing a request of ``kind`` (None: unknown)."""
    if isinstance(error, UnenforcedKeywordError) and kind in (None, RequestKind.JSON_SCHEMA):
        return f"{UNSUPPORTED_FEATURES} {BACKEND_NAME}: {error.reason}"
    phrase = _UNKNOWN_KIND if kind is None else _PHRASES[kind]
    return f"{phrase}: {error.reason}"
