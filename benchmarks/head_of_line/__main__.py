"""Command line: ``.venv/bin/python -m benchmarks.head_of_line [options]`` from the repo root."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from pathlib import Path

from benchmarks import cli
from benchmarks.head_of_line.report import breakdown_table, markdown, run_record
from benchmarks.head_of_line.run import BACKENDS, run
from benchmarks.head_of_line.workload import FULL, QUICK, Workload
from benchmarks.provenance import REPO

# The options that replace a field of the preset workload, by the field they set.
WORKLOAD_OPTIONS = ("block_s", "rounds", "rate_per_s", "slow_every_s")


def _apply_env(extra: dict[str, str]) -> None:
    """The engines' settings; the engine-core processes inherit them when they start."""
    from grammar_guard.demo.engine import ENGINE_ENV

    # ENGINE_ENV unless this environment sets them; the engine core in its own process.
    os.environ.update({**ENGINE_ENV, **os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", **extra})


def _workload(args: argparse.Namespace) -> Workload:
    given = {name: value for name in WORKLOAD_OPTIONS if (value := getattr(args, name)) is not None}
    return dataclasses.replace(QUICK if args.quick else FULL, **given)


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser(
        "Head-of-line blocking: do slow compiles delay everyone else's first token?",
        prog="python -m benchmarks.head_of_line",
    )
    parser.add_argument("--quick", action="store_true", help="one round of 15 s blocks")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--block", type=float, dest="block_s", help="seconds per block")
    parser.add_argument("--rounds", type=int, help="rounds of an alone and a loaded block")
    parser.add_argument(
        "--rate",
        type=float,
        dest="rate_per_s",
        help="simple requests per second (default: half what the first engine serves, at most 8)",
    )
    parser.add_argument(
        "--slow-every", type=float, dest="slow_every_s", help="seconds between slow requests"
    )
    parser.add_argument(
        "--env", action="append", default=[], type=cli.env_pair, metavar="NAME=VALUE"
    )
    parser.add_argument(
        "--json", type=Path, default=REPO / "build" / "head_of_line.json", help="every sample"
    )
    return parser


def main() -> None:
    args = _parser().parse_args()
    env = dict(args.env)
    _apply_env(env)
    started, load = time.perf_counter(), os.getloadavg()
    results, workload, calibration = asyncio.run(
        run(args.backends, _workload(args), calibrate_rate=args.rate_per_s is None)
    )
    report = run_record(workload, calibration, env, results, started, load)
    cli.write_json(args.json, report)
    cli.publish(markdown(workload, report), args.markdown)
    print(breakdown_table(report["summary"]))
    print(f"\n{report['seconds']:.0f} s in all; samples: {args.json}")


if __name__ == "__main__":
    main()
