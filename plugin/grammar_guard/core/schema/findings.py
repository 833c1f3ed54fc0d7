"""A keyword the engine would not enforce, located in the client's schema."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

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
