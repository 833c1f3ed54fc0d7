"""What compiling in worker processes costs against compiling in threads.

On the real 129k-token tokenizer, with the engine built as the backend builds
it: one compile at a time (a regex, a small schema, a schema with one
``maxLength: 300`` string), many compiles at once on ``--workers`` threads or
processes, the start and memory of a worker, and how much each way slows a
decoding loop running in the engine process (a stand-in: float32 matrix
products on torch's threads) while two large compiles run, with workers at
several nice values. Prints markdown tables; each ratio is process / thread.
Wall times are medians and need an otherwise idle machine; CPU times (the
workers' included) hardly depend on the machine's load.

    .venv/bin/python -m benchmarks.bench_compile_isolation [--repeats 5] [--workers 2]
        [--sections start compile decode] [--nice 0 5 10] [--quick] [--markdown PATH]

``--quick`` compiles a tenth as many small grammars per row, as many long
strings at once as there are workers, and strings of a short bound: the
same rows, in seconds, for a smoke run.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import torch
from harness.model import model_tokenizer

from grammar_guard.core.compile.in_thread import Compiler, InThreadCompiler
from grammar_guard.core.compile.workers import ProcessCompiler
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import DEFAULT_COMPILE_NICENESS, default_compile_workers

VOCAB_SIZE = 129280
NO_LIMIT_S = 3600.0
# The large compile: seconds on xgrammar. --quick uses short bounds instead,
# which compile in a fraction of that and still go through every row. The
# decode rows' bounds are ones no compile row used, so nothing comes from a cache.
LONG_STRING, DECODE_STRING = 300, 400
QUICK_LONG_STRING, QUICK_DECODE_STRING = 16, 24
SMALL_SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
    "required": ["color", "n"],
}


def regex(n: int) -> GrammarSpec:
    return GrammarSpec.build(RequestKind.REGEX, rf"item{n}-[a-z]+\d*", CompileOptions())


def small_schema(n: int) -> GrammarSpec:
    schema = {
        **SMALL_SCHEMA,
        "properties": {**SMALL_SCHEMA["properties"], f"k{n}": {"type": "integer"}},
    }
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, CompileOptions())


def long_string(n: int, base: int = LONG_STRING) -> GrammarSpec:
    schema = {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": base + n}},
        "required": ["text"],
    }
    return GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, CompileOptions())


@dataclass(frozen=True)
class Grammar:
    name: str
    make: Callable[[int], GrammarSpec]  # distinct specs of one cost, so nothing is reused
    batch: int  # how many to compile at once in the throughput rows


def grammars(long_base: int) -> tuple[Grammar, ...]:
    return (
        Grammar("regex", regex, 200),
        Grammar("small schema", small_schema, 200),
        Grammar(f"maxLength {long_base} string", functools.partial(long_string, base=long_base), 4),
    )


def build_engine() -> XGrammarEngine:
    """As ``core.engine_factory.build_engine`` does for a Hugging Face tokenizer."""
    threads = max(1, os.cpu_count() or 1)
    return XGrammarEngine.for_hf_tokenizer(model_tokenizer(), VOCAB_SIZE, compile_threads=threads)


@contextmanager
def process_compiler(
    engine: XGrammarEngine, workers: int, niceness: int = DEFAULT_COMPILE_NICENESS
) -> Iterator[ProcessCompiler]:
    compiler = ProcessCompiler(engine, workers=workers, kill_after_s=NO_LIMIT_S, niceness=niceness)
    try:
        # Every worker started (a compile each, all at once), so no row pays for a start.
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(compiler.compile, [regex(i) for i in range(workers)]))
        yield compiler
    finally:
        compiler.close()


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """CPU time used so far by this process and its live children (the workers)."""
    me = psutil.Process()
    total = time.process_time()
    for child in me.children(recursive=True):
        with suppress(psutil.NoSuchProcess):
            times = child.cpu_times()
            total += times.user + times.system
    return total


@dataclass(frozen=True)
class Cost:
    """Wall and CPU time of a compile (or of a batch), the workers' CPU included.

    CPU time hardly depends on what else the machine runs, so its ratio holds
    on a busy machine too; wall time does not.
    """

    wall_s: float
    cpu_s: float


def one_at_a_time(compile_one: Callable[[int], object], n: int) -> Cost:
    """Median wall time and mean CPU time of ``n`` compiles in a row."""
    walls = []
    cpu = cpu_seconds()  # read around the whole run: children's CPU time is counted in ticks
    for i in range(n):
        walls.append(seconds(lambda i=i: compile_one(i)))
    return Cost(statistics.median(walls), (cpu_seconds() - cpu) / n)


def at_once(compiler: Compiler, specs: Sequence[GrammarSpec], workers: int) -> Cost:
    cpu = cpu_seconds()
    with ThreadPoolExecutor(workers) as pool:
        wall = seconds(lambda: list(pool.map(compiler.compile, specs)))
    return Cost(wall, cpu_seconds() - cpu)


def show(value: float) -> str:
    return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.2f} s"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratio_row(case: str, thread: Cost, process: Cost) -> list[str]:
    return [
        case,
        show(thread.wall_s),
        show(process.wall_s),
        f"{process.wall_s / thread.wall_s:.2f}",
        f"{process.cpu_s / thread.cpu_s:.2f}",
    ]


def compile_rows(
    engine: XGrammarEngine, workers: int, repeats: int, quick: bool = False
) -> list[list[str]]:
    thread = InThreadCompiler(engine)
    rows = []
    with process_compiler(engine, workers) as process:
        for grammar in grammars(QUICK_LONG_STRING if quick else LONG_STRING):
            # Large compiles are few: a handful already takes seconds.
            n = repeats if grammar.batch < 10 else (4 if quick else 40) * repeats
            in_thread = one_at_a_time(lambda i, g=grammar: thread.compile(g.make(i)), n)
            in_process = one_at_a_time(lambda i, g=grammar: process.compile(g.make(i)), n)
            rows.append(ratio_row(f"{grammar.name}: one compile", in_thread, in_process))
            # What a thread pays when the serialised form is wanted too (to store it).
            with_bytes = one_at_a_time(
                lambda i, g=grammar: engine.serialize(engine.compile(g.make(i))), n
            )
            rows.append(
                ratio_row(f"{grammar.name}: one compile, serialised", with_bytes, in_process)
            )
            batch = quick_batch(grammar.batch, workers) if quick else grammar.batch
            specs = [grammar.make(i) for i in range(batch)]
            rows.append(
                ratio_row(
                    f"{grammar.name}: {batch} at once on {workers}",
                    at_once(thread, specs, workers),
                    at_once(process, specs, workers),
                )
            )
    return rows


def quick_batch(batch: int, workers: int) -> int:
    """A tenth of a batch of small compiles; one long compile a worker, not more."""
    return batch // 10 if batch >= 10 else min(batch, workers)


def start_rows(engine: XGrammarEngine) -> list[list[str]]:
    """A worker's start (until it can compile) and memory, in this process's conditions."""
    before = {child.pid for child in psutil.Process().children()}
    compiler = ProcessCompiler(engine, workers=1, kill_after_s=NO_LIMIT_S)
    try:
        first = seconds(lambda: compiler.compile(regex(1)))
        second = seconds(lambda: compiler.compile(regex(2)))
        workers = [c for c in psutil.Process().children() if c.pid not in before]
        rss = sum(worker.memory_info().rss for worker in workers)
    finally:
        compiler.close()
    return [
        ["worker start (first compile minus the next)", show(first - second)],
        ["worker memory (resident, after one compile)", f"{rss / 2**20:.0f} MiB"],
    ]


class DecodeLoop:
    """Stand-in for the engine's decoding: float32 matrix products on torch's threads."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self._a = torch.randn(256, 1024, generator=generator)
        self._b = torch.randn(1024, 1024, generator=generator)

    def step(self) -> float:
        return seconds(lambda: torch.mm(self._a, self._b))

    def alone(self) -> float:
        for _ in range(50):
            self.step()  # warm up
        return statistics.median(self.step() for _ in range(300))

    def during(self, compiler: Compiler, specs: Sequence[GrammarSpec]) -> tuple[float, float]:
        """Mean step time while ``specs`` compile at once, and how long they took."""
        with ThreadPoolExecutor(len(specs)) as pool:
            start = time.perf_counter()
            futures = [pool.submit(compiler.compile, spec) for spec in specs]
            steps = [self.step()]
            while not all(future.done() for future in futures):
                steps.append(self.step())
            wait(futures)
            return statistics.mean(steps), time.perf_counter() - start


def interference_rows(
    engine: XGrammarEngine, workers: int, nice_values: Sequence[int], length: int = DECODE_STRING
) -> list[list[str]]:
    """Decode steps while two large compiles run, with one decoding thread and with all CPUs.

    One thread is an engine driving a GPU (about a core busy); all CPUs is an
    engine decoding on the CPU.
    """
    specs = [long_string(i, length) for i in range(2)]
    rows = []
    with ExitStack() as stack:
        compilers: dict[str, Compiler] = {"threads": InThreadCompiler(engine)}
        for niceness in nice_values:
            compiler = stack.enter_context(process_compiler(engine, workers, niceness))
            compilers[f"processes, nice +{niceness}"] = compiler
        for threads in sorted({1, os.cpu_count() or 1}):
            torch.set_num_threads(threads)
            loop = DecodeLoop()
            alone = loop.alone()
            rows.append([str(threads), "none", f"{alone * 1e3:.2f} ms", "1.00", "-"])
            for name, compiler in compilers.items():
                step, wall = loop.during(compiler, specs)
                rows.append(
                    [str(threads), name, f"{step * 1e3:.2f} ms", f"{step / alone:.2f}", show(wall)]
                )
    return rows


SECTIONS = ("start", "compile", "decode")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=default_compile_workers())
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=SECTIONS)
    parser.add_argument(
        "--nice",
        type=int,
        nargs="+",
        default=sorted({0, 5, DEFAULT_COMPILE_NICENESS}),
        help="worker nice values compared in the decode section",
    )
    parser.add_argument("--quick", action="store_true", help="fewer compiles per row")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args: Any = parser.parse_args(argv)
    engine = build_engine()
    parts: list[str] = []

    def emit(part: str) -> None:
        print(part + "\n", flush=True)  # as it comes: a full run takes minutes
        parts.append(part)

    emit(f"{os.cpu_count()} CPUs, {args.workers} compile workers, median of {args.repeats}.")
    if "start" in args.sections:
        emit(table(["", "value"], start_rows(engine)))
    if "compile" in args.sections:
        header = ["case", "thread", "process", "wall: process / thread", "CPU: process / thread"]
        emit(table(header, compile_rows(engine, args.workers, args.repeats, args.quick)))
    if "decode" in args.sections:
        header = [
            "decode threads",
            "two large compiles in",
            "decode step (mean)",
            "vs no compile",
            "compiles took",
        ]
        length = QUICK_DECODE_STRING if args.quick else DECODE_STRING
        emit(table(header, interference_rows(engine, args.workers, args.nice, length)))
    if args.markdown:
        args.markdown.write_text("\n\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
