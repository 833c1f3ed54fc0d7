"""Errors a client can act on.

``InvalidGrammarError`` derives from ``ValueError`` so hosts that map
validation errors to a 400-class response (vLLM does) treat it as the
client's problem, not as a server fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grammar_guard.core.schema.findings import Finding

# Long reasons are cut so a rejected megabyte schema is never echoed back.
MAX_REASON_CHARS = 400


def shorten(text: str, limit: int = MAX_REASON_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


# The most characters of a client's or an operator's text a message quotes:
# enough to recognise it, too few for one value to flood a log.
EXCERPT_CHARS = 200


def quoted_excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` as a Python string literal, cut after ``limit`` characters.

    For messages and log lines that show text a client or an operator wrote:
    escaped, it cannot start a log line of its own (a newline, a carriage
    return, a terminal escape), and cut, it cannot flood one.
    """
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


class InvalidGrammarError(ValueError):
    """The request's grammar cannot be compiled; retrying will not help."""

    def __init__(self, reason: str) -> None:
        self.reason = shorten(reason)
        super().__init__(self.reason)


class PastEngineLimitsError(InvalidGrammarError):
    """The grammar is valid, but larger than one engine's parser holds (another may take it)."""


class UnenforcedKeywordError(InvalidGrammarError):
    """The schema asks for constraints the grammar engine would silently not enforce.

    ``findings`` lists each one (``.keyword``, ``.pointer``, ``.label``,
    ``.reason``; see :class:`grammar_guard.core.schema.findings.Finding`); the
    reason names as many as fit and says how to accept them anyway.
    """

    SUFFIX = "; set GRAMMAR_GUARD_UNENFORCED=warn to accept them unenforced"

    def __init__(self, kind: str, findings: Sequence[Finding]) -> None:
        self.kind = kind
        self.findings = tuple(findings)
        head = f"{kind} uses keywords grammar-guard cannot enforce: "
        budget = MAX_REASON_CHARS - len(head) - len(self.SUFFIX)
        listed: list[str] = []
        text = ""
        for index, finding in enumerate(self.findings):
            item = shorten(finding.describe(), 160)
            candidate = ", ".join([*listed, item])
            left_after = len(self.findings) - index - 1
            tail = f" and {left_after} more" if left_after else ""
            if listed and len(candidate) + len(tail) > budget:
                text = ", ".join(listed) + f" and {len(self.findings) - index} more"
                break
            listed.append(item)
        else:
            text = ", ".join(listed)
        super().__init__(head + text + self.SUFFIX)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled across compile processes: rebuild from the findings, not the reason.
        return (type(self), (self.kind, self.findings))


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


class CompileCrashedError(RuntimeError):
    """The process compiling the request's grammar died before it answered.

    Not the grammar's fault as far as anyone knows (an operator, a memory
    limit or the OOM killer may have ended the process), so not an
    :class:`InvalidGrammarError`: the key is compiled again once
    ``retry_after_s`` has passed (None where that is not decided: as the
    compiler raises it, before the cache has settled the key).
    """

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)
