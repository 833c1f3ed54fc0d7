"""Every benchmark, how ``python -m benchmarks all`` runs it, and where its tables go.

Each runs as a subprocess (nothing of one engine may leak into the next) and writes its tables
to the file its ``--markdown`` names; the runner adds the provenance line and, unless told not
to, puts them in their section of docs/benchmarks.md.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.docs_sections import DOCS, missing_sections, write_section
from benchmarks.provenance import REPO, commit, header

TABLES = "tables.md"
LOG = "output.log"
# The smoke coverage run: a few schemas of both collections, quick to compile,
# with keywords xgrammar enforces and one it does not (all in the repository's data/).
COVERAGE_SMOKE_FILES = ("type.json", "enum.json", "maxLength.json", "Github_easy---o10008.json")
COVERAGE_SMOKE = ("--files", ",".join(COVERAGE_SMOKE_FILES), "--limit", "2", "--out", "{folder}")
# Why a benchmark whose full form reads the full collections did not run without them.
NEEDS_DATA = "needs --data DIR (the full collections)"

OK, FAILED, SKIPPED = "ok", "FAILED", "skipped"

# The interpreter's arguments, given the benchmark's folder; every command ends
# with ``--markdown`` into that folder, where the runner reads its tables.
Command = Callable[[Path], list[str]]


@dataclass(frozen=True)
class Benchmark:
    name: str  # also the name of its section in docs/benchmarks.md
    full: Command
    smoke: Command | None  # None: CI runs it elsewhere (``covered_by``)
    covered_by: str = ""
    starts_engines: bool = False
    # Its full form reads the full collections (``--data DIR``); its smoke form,
    # the repository's sample in data/. Without --data a full run skips it.
    full_data: bool = False


def _module(name: str, *arguments: str) -> Command:
    """``python -m benchmarks.NAME arguments``, ``{folder}`` in them standing for its folder."""
    return lambda folder: ["-m", f"benchmarks.{name}", *_filled(arguments, folder)]


def _filled(arguments: Sequence[str], folder: Path) -> list[str]:
    return [argument.format(folder=folder) for argument in (*arguments, "--markdown", MARKDOWN)]


def _scripted(name: str, *smoke: str, starts_engines: bool = False) -> Benchmark:
    """A module whose smoke form is its full form with ``smoke`` arguments added."""
    return Benchmark(name, _module(name), _module(name, *smoke), starts_engines=starts_engines)


MARKDOWN = "{folder}/" + TABLES
HEAD_OF_LINE_FILES = ("--json", "{folder}/samples.json")
# grammar-guard alone: the vLLM backends' side of the script is exercised by
# the end-to-end smoke, and each engine start costs a minute of CI.
HEAD_OF_LINE_SMOKE = ("--quick", "--backends", "grammar-guard", "--block", "5")
BENCHMARKS = (
    _scripted("bench_fill", "--repeats", "3", "--batch-sizes", "8"),
    _scripted("gpu_apply_check", "--part", "kernels"),
    _scripted("bench_end_to_end", "--smoke", starts_engines=True),
    Benchmark(
        "bench_head_of_line",
        full=_module("head_of_line", *HEAD_OF_LINE_FILES),
        smoke=_module("head_of_line", *HEAD_OF_LINE_SMOKE, *HEAD_OF_LINE_FILES),
        starts_engines=True,
    ),
    Benchmark(
        "bench_restart",
        full=_module("bench_restart", "--out-dir", "{folder}"),
        # Its --smoke form is the persistent-cache restart test's run.
        smoke=None,
        covered_by="integration_tests/test_persistent_cache.py (bench_restart --smoke)",
        starts_engines=True,
    ),
    Benchmark(
        "load_soak",
        full=_module("load_soak", "--json", "{folder}/load_soak.json"),
        smoke=None,
        covered_by="integration_tests/test_load_soak.py",
        starts_engines=True,
    ),
    Benchmark(
        "coverage",
        full=_module("coverage", "--out", "{folder}"),
        smoke=_module("coverage", *COVERAGE_SMOKE),
        full_data=True,
    ),
)
NAMES = tuple(benchmark.name for benchmark in BENCHMARKS)


@dataclass(frozen=True)
class Outcome:
    name: str
    result: str  # OK, FAILED or SKIPPED
    seconds: float
    note: str = ""


@dataclass(frozen=True)
class RunOptions:
    smoke: bool
    docs: bool  # write the sections of docs/benchmarks.md (never in a smoke run)
    out: Path
    command: str  # as the provenance line names it
    data: Path | None = None  # the full collections, for the full forms that read them


def skip_reason(benchmark: Benchmark, options: RunOptions) -> str | None:
    """Why ``benchmark`` does not run in this run, or None when it runs."""
    if options.smoke and benchmark.smoke is None:
        return f"no smoke form: {benchmark.covered_by}"
    if not options.smoke and benchmark.full_data and options.data is None:
        # Its sections hold the full collections' figures: never the sample's.
        return NEEDS_DATA
    return None


def command_line(benchmark: Benchmark, options: RunOptions) -> list[str] | None:
    if skip_reason(benchmark, options) is not None:
        return None
    form = benchmark.smoke if options.smoke else benchmark.full
    assert form is not None
    command = [sys.executable, *form(options.out / benchmark.name)]
    if benchmark.full_data and not options.smoke:
        command += ["--data", str(options.data)]
    return command


def run_benchmark(benchmark: Benchmark, options: RunOptions) -> Outcome:
    folder = options.out / benchmark.name
    command = command_line(benchmark, options)
    if command is None:
        return Outcome(benchmark.name, SKIPPED, 0.0, skip_reason(benchmark, options) or "")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / LOG
    print(f"== {benchmark.name}: {' '.join(command[1:])}\n   log: {log}", flush=True)
    tree = commit()  # before it runs: the tree may change while it does
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as sink:
        done = subprocess.run(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
        print("\n".join(f"   | {line}" for line in tail), flush=True)
        return Outcome(benchmark.name, FAILED, seconds, f"exit {done.returncode}; see {log}")
    written = folder / TABLES
    tables = written.read_text(encoding="utf-8") if written.exists() else None
    if tables is None:  # it ran and measured nothing (gpu_apply_check without a GPU)
        lines = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return Outcome(benchmark.name, SKIPPED, seconds, lines[-1] if lines else "no output")
    section = f"{header(tree, options.command)}\n\n{tables.strip()}\n"
    (options.out / f"{benchmark.name}.md").write_text(section, encoding="utf-8")
    if options.docs:
        write_section(benchmark.name, section)
    return Outcome(benchmark.name, OK, seconds)


def run_all(names: Sequence[str], options: RunOptions) -> list[Outcome]:
    chosen = [benchmark for benchmark in BENCHMARKS if benchmark.name in names]
    if options.docs:
        missing = missing_sections(DOCS.read_text(encoding="utf-8"), [b.name for b in chosen])
        if missing:
            raise SystemExit(f"{DOCS} has no generated section for: {', '.join(missing)}")
    outcomes = []
    for benchmark in chosen:
        outcome = run_benchmark(benchmark, options)
        print(f"   {outcome.result} in {outcome.seconds:.0f} s {outcome.note}".rstrip(), flush=True)
        outcomes.append(outcome)
    summary = summary_table(outcomes)
    options.out.mkdir(parents=True, exist_ok=True)  # every one may have been skipped
    (options.out / "summary.md").write_text(summary, encoding="utf-8")
    print("\n" + summary, end="")
    return outcomes


def summary_table(outcomes: Sequence[Outcome]) -> str:
    lines = ["| benchmark | result | seconds | note |", "|---|---|---:|---|"]
    lines += [f"| {o.name} | {o.result} | {o.seconds:.0f} | {o.note} |" for o in outcomes]
    return "\n".join(lines) + "\n"
