"""The generated sections of docs/benchmarks.md, and how a run replaces one.

A section is everything between ``<!-- generated:NAME -->`` and
``<!-- /generated:NAME -->``. Only that text is rewritten; the hand-written
prose around it is never touched, so it must say nothing a new table could
contradict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
_SECTION = re.compile(
    r"(?P<open><!-- generated:(?P<name>[\w-]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /generated:(?P=name) -->)",
    re.DOTALL,
)


def section_names(text: str) -> list[str]:
    return [match["name"] for match in _SECTION.finditer(text)]


def missing_sections(text: str, names: Iterable[str]) -> list[str]:
    present = set(section_names(text))
    return [name for name in names if name not in present]


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with section ``name`` holding ``body``; KeyError if it has no such section."""
    for match in _SECTION.finditer(text):
        if match["name"] == name:
            # Blank lines around the body: markdown then reads a table right after the marker.
            filled = f"{match['open']}\n{body.strip()}\n\n{match['close']}"
            return text[: match.start()] + filled + text[match.end() :]
    raise KeyError(f"no <!-- generated:{name} --> section")


def write_section(name: str, body: str, path: Path = DOCS) -> None:
    path.write_text(replace_section(path.read_text(encoding="utf-8"), name, body), encoding="utf-8")
