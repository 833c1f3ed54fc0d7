"""A keyword the engine would not enforce, located in the client's schema."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from grammar_guard.core.schema.pointers import join_pointer, resolve_pointer
from grammar_guard.core.schema.vocabulary import KNOWN_KEYWORDS


@dataclass(frozen=True)
class Finding:
    """One keyword (or keyword value) the engine would not enforce.

    ``keyword`` is the schema keyword as written, ``value`` narrows it where
    the value decides (``format: email``, ``required: id``), ``pointer`` is
    the JSON pointer of the keyword in the document the client sent.
    """

    keyword: str
    pointer: str
    value: str | None = None
    reason: str = ""

    @property
    def label(self) -> str:
        return self.keyword if self.value is None else f"{self.keyword}: {self.value}"

    @property
    def metric_keyword(self) -> str:
        """A bounded label for metrics: the keyword, or ``unknown`` should one slip through.

        Client text must never become a label: it would grow the metric
        without bound.
        """
        return self.keyword if self.keyword in KNOWN_KEYWORDS else "unknown"

    def describe(self) -> str:
        return f"'{self.label}' at {self.pointer or '/'}"


def iter_labels(findings: Iterable[Finding]) -> Iterator[str]:
    """Each distinct metric label among ``findings``, once."""
    seen: set[str] = set()
    for finding in findings:
        if finding.metric_keyword not in seen:
            seen.add(finding.metric_keyword)
            yield finding.metric_keyword


def as_written(finding: Finding, document: Any) -> Finding:
    """``finding``, found in the rewritten schema, told where the client wrote its cause.

    A ``format`` is rewritten as a ``pattern`` (and, for a host name, a
    ``maxLength``) that the client never wrote: a keyword the engine would
    not enforce there is reported as that ``format``, in the client's words.
    So is a ``not`` written as what it leaves (a ``contains``, for a ``not``
    of ``items``). Any other finding already points into ``document`` and is
    returned as is.
    """
    parent, _, keyword = finding.pointer.rpartition("/")
    node = resolve_pointer(document, parent)
    if not isinstance(node, dict) or keyword in node:
        return finding
    if "format" not in node:
        if "not" not in node:
            return finding
        return replace(finding, keyword="not", pointer=join_pointer(parent, "not"), value=None)
    value = node["format"]
    return replace(
        finding,
        keyword="format",
        pointer=join_pointer(parent, "format"),
        value=value if isinstance(value, str) else None,
    )
