"""Every benchmark still runs: ``python -m benchmarks all --smoke``, one benchmark per test.

A benchmark that nobody runs goes stale: its code drifts from the plugin's
and its tables from the code. Each test here runs one benchmark's smoke form
through the same runner that regenerates docs/benchmarks.md, and asserts it
exited cleanly and wrote a table. A benchmark whose own check fails (masks
that should match, token ids that should be the same) exits non-zero, so its
test fails and names it. The figures of a smoke run mean nothing and are
not looked at; the smoke run must not write the docs.

load_soak and bench_restart have no smoke form here: their own integration
tests run them (test_load_soak.py, and test_persistent_cache.py, which runs
bench_restart's smoke form: the filling run and one restart from the cache
folder, where its full form starts five engines one after another), so no
engine starts twice for one check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.docs_sections import DOCS, missing_sections, replace_section, section_names
from benchmarks.suite import BENCHMARKS, NAMES
from harness.skip_policy import unavailable_here

REPO = Path(__file__).resolve().parent.parent
# Against a hang only: the longest smoke form takes minutes, never this long.
RUN_LIMIT_S = 1200
_TABLE_RULE = re.compile(r"^\|(\s*:?-+:?\s*\|)+$", re.MULTILINE)


def _smoke(names: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks", "all", "--smoke", "--only", *names]
    return subprocess.run(
        [*command, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_LIMIT_S,
        check=False,
    )


def _smoked() -> list[object]:
    return [
        pytest.param(b.name, marks=[pytest.mark.engine] if b.starts_engines else [], id=b.name)
        for b in BENCHMARKS
        if b.smoke is not None
    ]


@pytest.mark.parametrize("name", _smoked())
def test_the_smoke_form_runs_and_writes_a_table(name: str, tmp_path: Path) -> None:
    docs_before = DOCS.read_text(encoding="utf-8")
    run = _smoke([name], tmp_path)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    assert DOCS.read_text(encoding="utf-8") == docs_before, "a smoke run wrote the docs"
    section = tmp_path / f"{name}.md"
    if not section.exists():
        # Only a benchmark that needs hardware this machine lacks may run and measure nothing.
        assert name == "gpu_apply_check", run.stdout[-4000:]
        assert re.search(rf"\| {name} \| skipped \|", run.stdout), run.stdout[-4000:]
        unavailable_here("no NVIDIA GPU here: gpu_apply_check skipped itself, as it should")
    text = section.read_text(encoding="utf-8")
    assert text.startswith("_Generated "), text[:300]
    assert _TABLE_RULE.search(text), text[:2000]


def test_benchmarks_with_engine_tests_of_their_own_are_left_to_them(tmp_path: Path) -> None:
    names = ["load_soak", "bench_restart"]
    run = _smoke(names, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "integration_tests/test_load_soak.py" in run.stdout
    assert "integration_tests/test_persistent_cache.py" in run.stdout
    # Nothing ran, so nothing but the run's summary was written.
    assert [path.name for path in tmp_path.glob("*.md")] == ["summary.md"]


def test_every_benchmark_has_a_generated_section_in_the_docs() -> None:
    assert missing_sections(DOCS.read_text(encoding="utf-8"), NAMES) == []


def test_a_generated_section_is_replaced_and_the_prose_around_it_kept() -> None:
    text = (
        "Prose before.\n\n<!-- generated:a -->\nold table\n<!-- /generated:a -->\n\n"
        "Prose between.\n\n<!-- generated:b -->\nkept\n<!-- /generated:b -->\nProse after.\n"
    )
    replaced = replace_section(text, "a", "| new |\n|---|\n")
    assert section_names(replaced) == ["a", "b"]
    assert "old table" not in replaced
    assert "<!-- generated:a -->\n\n| new |\n|---|\n\n<!-- /generated:a -->" in replaced
    for kept in ("Prose before.", "Prose between.", "kept", "Prose after."):
        assert kept in replaced
    with pytest.raises(KeyError):
        replace_section(text, "c", "anything")
