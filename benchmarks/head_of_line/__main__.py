"""Command line: ``.venv/bin/python -m benchmarks.head_of_line [options]`` from the repo root."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from pathlib import Path

from benchmarks import cli
from benchmarks.head_of_line.report import (
    breakdown_table,
    caption,
    goal_line,
    headline_table,
    markdown,
    run_record,
)
from benchmarks.head_of_line.run import BACKENDS, run
from benchmarks.head_of_line.workload import FULL, QUICK, Workload
from benchmarks.provenance import REPO

DEFAULT_JSON = REPO / "build" / "head_of_line.json"


def _apply_env(extra: dict[str, str]) -> None:
    """The engines' settings; the engine-core processes inherit them when they start."""
    from grammar_guard.demo.engine import ENGINE_ENV

    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the engine core in its own process
    os.environ.update(extra)


def _workload(args: argparse.Namespace) -> Workload:
    workload = QUICK if args.quick else FULL
    overrides = {
        "block_s": args.block,
        "rounds": args.rounds,
        "rate_per_s": args.rate,
        "slow_every_s": args.slow_every,
    }
    return dataclasses.replace(
        workload, **{name: value for name, value in overrides.items() if value is not None}
    )


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser(
        "Head-of-line blocking: do slow compiles delay everyone else's first token?",
        prog="python -m benchmarks.head_of_line",
    )
    parser.add_argument("--quick", action="store_true", help="one round of 15 s blocks")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--block", type=float, help="seconds per block")
    parser.add_argument("--rounds", type=int, help="rounds of an alone and a loaded block")
    parser.add_argument(
        "--rate",
        type=float,
        help="simple requests per second (default: half what the first engine serves, at most 8)",
    )
    parser.add_argument("--slow-every", type=float, help="seconds between slow requests")
    parser.add_argument(
        "--env", action="append", default=[], type=cli.env_pair, metavar="NAME=VALUE"
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="every sample")
    return parser


def main() -> None:
    args = _parser().parse_args()
    workload = _workload(args)
    env = dict(args.env)
    _apply_env(env)

    started, load = time.perf_counter(), os.getloadavg()
    results, workload, calibration = asyncio.run(
        run(args.backends, workload, calibrate_rate=args.rate is None)
    )
    report = run_record(workload, calibration, env, results, started, load)
    cli.write_json(args.json, report)
    print(caption(workload, report))
    print()
    print(headline_table(report["summary"]))
    print()
    print(breakdown_table(report["summary"]))
    if goal := goal_line(report["summary"], workload.rate_per_s):
        print(f"\n{goal}")
    cli.write(args.markdown, markdown(workload, report))
    print(f"\n{report['seconds']:.0f} s in all; samples: {args.json}")


if __name__ == "__main__":
    main()
