"""No module of the plugin is over 400 lines: past that, a module holds more than one job."""

from __future__ import annotations

from pathlib import Path

import grammar_guard

PLUGIN = Path(grammar_guard.__file__).parent
MAX_LINES = 400


def test_no_plugin_module_is_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(PLUGIN)): lines
        for path in sorted(PLUGIN.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert too_long == {}
