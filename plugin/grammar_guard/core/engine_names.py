"""The grammar libraries the plugin compiles with, by the one name each goes by everywhere.

Metrics labels, logs, compile plans, the ``GRAMMAR_GUARD_ENGINE`` setting
and the persistent cache's files all use these names, so they sit beneath
everything that names an engine.
"""

from __future__ import annotations

import enum


class EngineName(enum.StrEnum):
    """A grammar library the plugin compiles with; its value is what metrics and logs say."""

    XGRAMMAR = "xgrammar"
    LLGUIDANCE = "llguidance"
