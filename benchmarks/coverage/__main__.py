"""Command line: ``.venv/bin/python -m benchmarks.coverage [options]`` from the repository root."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks import cli
from benchmarks.coverage.report import render_overview
from benchmarks.coverage.results import CRASH, TIMEOUT, SchemaResult
from benchmarks.coverage.run import DEFAULT_TIMEOUT_S, DEFAULT_WORKERS, CoverageConfig, run_coverage
from harness.schema_data.cases import (
    JSONSCHEMABENCH,
    PROJECT_CASES,
    SHARED_SUITES,
    SUITES,
    TEST_SUITE,
    Selection,
    data_dir_or_sample,
)

# "both": the two shared collections; "all" adds the project's own cases.
_SUITE_CHOICES = {
    "all": SUITES,
    "both": SHARED_SUITES,
    **{suite: (suite,) for suite in (JSONSCHEMABENCH, TEST_SUITE, PROJECT_CASES)},
}
_PROGRESS_EVERY_S = 15.0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = cli.parser(
        "Compile every schema through grammar-guard's and vLLM's paths; feed each instance.",
        prog="python -m benchmarks.coverage",
    )
    add = parser.add_argument
    add("--suite", choices=list(_SUITE_CHOICES), default="all", help="docs/coverage.md")
    add("--categories", default="", help="comma-separated categories; shell patterns allowed")
    add("--files", default="", help="comma-separated file names (or suite-relative paths)")
    add("--limit", type=int, help="the first N schemas of each category")
    add("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per schema's compile")
    add("--workers", type=int, default=DEFAULT_WORKERS)
    add("--whitespace", action="store_true", help="JSON with whitespace (default: compact)")
    add("--out", type=Path, default=Path("build/coverage"))
    add("--data", type=Path, metavar="DIR", help="the full collections (default: data/'s sample)")
    return parser.parse_args(argv)


def _split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


class _ProgressLine:
    """A line on stderr every few seconds, and one per timeout or crash."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._last = self._started

    def __call__(self, done: int, total: int, result: SchemaResult) -> None:
        for path, outcome in result.paths.items():
            if outcome.outcome in (TIMEOUT, CRASH):
                print(f"  {result.ref.name} {path}: {outcome.outcome}", file=sys.stderr)
        now = time.monotonic()
        if now - self._last >= _PROGRESS_EVERY_S or done == total:
            self._last = now
            elapsed = now - self._started
            left = elapsed / done * (total - done)
            print(
                f"[{done}/{total}] {elapsed / 60:.1f} min, about {left / 60:.1f} min left",
                file=sys.stderr,
            )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    data_dir = data_dir_or_sample(args.data)
    if not data_dir.is_dir():
        print(f"no data folder at {data_dir} (give one with --data)", file=sys.stderr)
        return 2
    config = CoverageConfig(
        data_dir=data_dir,
        selection=Selection(
            suites=_SUITE_CHOICES[args.suite],
            categories=_split(args.categories),
            files=_split(args.files),
            limit=args.limit,
        ),
        whitespace=args.whitespace,
        timeout_s=args.timeout,
        workers=args.workers,
        out_dir=args.out,
    )
    coverage = run_coverage(config, progress=_ProgressLine())
    print(coverage.tables)
    cli.write(args.markdown, render_overview(coverage.report))
    for path in coverage.files:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
