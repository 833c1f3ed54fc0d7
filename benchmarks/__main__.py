"""Command line: ``python -m benchmarks all [--smoke] [--only NAME ...] [--no-docs] [--data DIR]``.

Run every benchmark on the code as it is and write their tables into docs/benchmarks.md
(``--smoke``: short forms that prove each still runs, never the docs); docs/benchmarks.md
("Running them") has the details.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from benchmarks.provenance import REPO
from benchmarks.suite import (
    BENCHMARKS,
    FAILED,
    NAMES,
    RunOptions,
    command_line,
    run_all,
    skip_reason,
)

DEFAULT_OUT = {False: REPO / "build" / "benchmarks", True: REPO / "build" / "benchmarks-smoke"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[1]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("all", help="run the benchmarks and regenerate their tables")
    run.add_argument("--smoke", action="store_true", help="the short forms; never touches the docs")
    run.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", help=", ".join(NAMES))
    run.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md as it is")
    run.add_argument(
        "--out", type=Path, help="where each benchmark's files go (default: build/...)"
    )
    run.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="the folder holding the full collections (json-schema-test-suite/, "
        "jsonschemabench/) for the full form of coverage; without it a full run skips it "
        "(its smoke form reads the repository's sample in data/)",
    )
    run.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return parser


def _as_typed(arguments: argparse.Namespace) -> str:
    """The command the provenance line names: enough to run it again."""
    words = ["python", "-m", "benchmarks", "all"]
    words += ["--smoke"] if arguments.smoke else []
    words += ["--only", *arguments.only] if arguments.only else []
    words += ["--data", str(arguments.data)] if arguments.data else []
    return shlex.join(words)


def main(argv: list[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    names = arguments.only or list(NAMES)
    if arguments.data is not None and not arguments.data.is_dir():
        print(f"no data folder at {arguments.data} (--data DIR)", file=sys.stderr)
        return 2
    options = RunOptions(
        smoke=arguments.smoke,
        docs=not (arguments.smoke or arguments.no_docs),
        # Absolute: the benchmarks run from the repository root, wherever this was started.
        out=(arguments.out or DEFAULT_OUT[arguments.smoke]).resolve(),
        command=_as_typed(arguments),
        data=arguments.data.resolve() if arguments.data else None,
    )
    if arguments.dry_run:
        for benchmark in BENCHMARKS:
            if benchmark.name in names:
                command = command_line(benchmark, options)
                reason = skip_reason(benchmark, options)
                shown = shlex.join(command) if command else f"(skipped: {reason})"
                print(f"{benchmark.name}: {shown}")
        return 0
    outcomes = run_all(names, options)
    return 1 if any(outcome.result == FAILED for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
