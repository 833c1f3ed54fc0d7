"""Time to first token of a slow schema after an engine restart, with and without the cache folder.

A restart is a fresh engine process (the tiny model, an in-process engine
core): once it is up and has decoded one unconstrained request, the first
request for a slow schema (long bounded strings) is timed with
``max_tokens=1``, which is its time to first token. "compile" engines run
without ``GRAMMAR_GUARD_CACHE_DIR``; "disk" engines with a folder that an
untimed first engine filled. Each round restarts one engine of each kind,
one after the other, so load from other processes hits both alike; the
report has every run and the medians.

The second part measures the cache file formats (``disk_store.CODECS``) on
the same grammar: file size, write time and load time (read, decompress,
``deserialize``), from the page cache and after dropping the file's pages
(``posix_fadvise``), median of ``--format-reps``.

    .venv/bin/python benchmarks/bench_restart.py [--rounds 3] [--out-dir bench-out]
    .venv/bin/python benchmarks/bench_restart.py --quick   # one round, a smaller schema

Writes ``restart.json`` and ``restart.md`` to ``--out-dir`` and prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

RESULT = "RESULT "
# Long enough for the slowest schema on a loaded 2-core machine: this
# benchmark measures compiles, it must never time one out.
COMPILE_TIMEOUT_S = 1800


def slow_schema(*lengths: int) -> dict[str, Any]:
    names = [f"text{i}" for i in range(len(lengths))]
    return {
        "type": "object",
        "properties": {
            name: {"type": "string", "maxLength": length}
            for name, length in zip(names, lengths, strict=True)
        },
        "required": names,
    }


FULL_SCHEMA = slow_schema(1000, 2000)
QUICK_SCHEMA = slow_schema(300)


# --- worker: one engine, one timed request ---------------------------------------------


def _worker(schema_json: str) -> None:
    import grammar_guard
    from grammar_guard.demo.engine import start_engine

    llm = start_engine()
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm.generate(["Warm up: "], [SamplingParams(max_tokens=2)], use_tqdm=False)
    params = SamplingParams(
        max_tokens=1, structured_outputs=StructuredOutputsParams(json=json.loads(schema_json))
    )
    started = time.perf_counter()
    output = llm.generate(["Write it: "], [params], use_tqdm=False)[0].outputs[0]
    seconds = time.perf_counter() - started
    service = llm.llm_engine.engine_core.engine_core.structured_output_manager.backend.service
    service.drain()  # a filling run's file is complete before the process ends
    numbers = grammar_guard.metrics_snapshot().as_dict()
    disk = {name: numbers[f"grammar_guard_disk_{name}_total"] for name in ("hits", "misses")}
    print(RESULT + json.dumps({"ttft_s": seconds, "text": output.text, **disk}), flush=True)


def _restart(schema: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """Start a fresh engine process and time its first request for ``schema``."""
    env = {**os.environ, "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(COMPILE_TIMEOUT_S)}
    env.pop("GRAMMAR_GUARD_CACHE_DIR", None)
    if folder is not None:
        env["GRAMMAR_GUARD_CACHE_DIR"] = str(folder)
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(schema)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not results:
        raise RuntimeError(f"engine process failed:\n{(done.stdout + done.stderr)[-6000:]}")
    return dict(json.loads(results[-1].removeprefix(RESULT)))


def measure_restarts(schema: dict[str, Any], rounds: int, folder: Path) -> dict[str, Any]:
    fill = _restart(schema, folder)
    if fill["misses"] != 1:
        raise RuntimeError(f"the filling run did not compile: {fill}")
    runs: dict[str, list[dict[str, Any]]] = {"compile": [], "disk": []}
    for round_ in range(rounds):
        runs["compile"].append(_restart(schema, None))
        runs["disk"].append(_restart(schema, folder))
        if runs["disk"][-1]["hits"] != 1:
            raise RuntimeError(f"a disk run compiled instead of loading: {runs['disk'][-1]}")
        print(f"round {round_ + 1}/{rounds}: " + ", ".join(
            f"{kind} {run[-1]['ttft_s']:.2f} s" for kind, run in runs.items()
        ), file=sys.stderr)  # fmt: skip
    medians = {kind: statistics.median(r["ttft_s"] for r in run) for kind, run in runs.items()}
    return {
        "fill_ttft_s": fill["ttft_s"],
        "runs": runs,
        "median_ttft_s": medians,
        "speedup": medians["compile"] / medians["disk"],
    }


# --- cache file formats ----------------------------------------------------------------


def _drop_from_page_cache(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def measure_formats(schema: dict[str, Any], folder: Path, reps: int) -> dict[str, Any]:
    """Every codec on the grammar the filling run stored in ``folder``."""
    from grammar_guard.cli.model import ModelArgs, load_engine
    from grammar_guard.core.disk_store import CODECS, DiskStore
    from grammar_guard.core.metrics import CacheMetrics
    from grammar_guard.core.settings import CacheSettings
    from grammar_guard.core.spec import CompileOptions, GrammarSpec, RequestKind
    from grammar_guard.demo.engine import STRUCTURED_OUTPUTS_CONFIG
    from grammar_guard.demo.tiny_model import build_tiny_model

    settings = CacheSettings.from_env()
    engine = load_engine(ModelArgs(model=str(build_tiny_model())), unenforced=settings.unenforced)
    compact = CompileOptions(any_whitespace=not STRUCTURED_OUTPUTS_CONFIG["disable_any_whitespace"])
    spec = GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, compact)
    compiled = DiskStore(folder, engine, max_bytes=1 << 40, metrics=CacheMetrics()).load(spec)
    if compiled is None:
        raise RuntimeError(f"no stored grammar for the schema in {folder}")
    started = time.perf_counter()
    raw = engine.serialize(compiled)
    serialize_s = time.perf_counter() - started
    formats: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for codec in CODECS:
            store = DiskStore(
                Path(scratch) / codec, engine, max_bytes=1 << 40, metrics=CacheMetrics(),
                codec=codec,
            )  # fmt: skip
            started = time.perf_counter()
            store.save(spec, compiled, raw)
            write_s = time.perf_counter() - started
            path = store.path_for(spec)
            warm, cold = [], []
            for _ in range(reps):
                for timings, drop in ((warm, False), (cold, True)):
                    if drop:
                        _drop_from_page_cache(path)
                    started = time.perf_counter()
                    if store.load(spec) is None:
                        raise RuntimeError(f"{codec}: the stored grammar did not load")
                    timings.append(time.perf_counter() - started)
            formats[codec] = {
                "file_bytes": path.stat().st_size,
                "write_s": write_s,
                "load_s": statistics.median(warm),
                "load_cold_s": statistics.median(cold),
            }
            print(f"format {codec}: {formats[codec]}", file=sys.stderr)
    return {
        "serialized_bytes": len(raw),
        "memory_bytes": compiled.memory_bytes,
        "serialize_s": serialize_s,
        "formats": formats,
    }


# --- report ----------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    restarts, formats = report["restarts"], report["formats"]
    lengths = ", ".join(str(p["maxLength"]) for p in report["schema"]["properties"].values())
    medians = restarts["median_ttft_s"]
    lines = [
        f"### Restart: time to first token ({report['date']}, {report['rounds']} rounds)",
        "",
        f"Schema with strings of maxLength {lengths}, tiny model, fresh engine per run.",
        "",
        "| Engine after restart | TTFT, median | runs |",
        "| --- | --- | --- |",
    ]
    for kind, label in (("compile", "no cache folder (compiles)"), ("disk", "cache folder")):
        runs = ", ".join(f"{run['ttft_s']:.2f}" for run in restarts["runs"][kind])
        lines.append(f"| {label} | {medians[kind]:.2f} s | {runs} |")
    lines += [
        "",
        f"Speed-up: **{restarts['speedup']:.1f}x**.",
        "",
        f"### Cache file formats (one grammar: {formats['memory_bytes'] / 2**20:.1f} MiB in "
        f"memory, {formats['serialized_bytes'] / 2**20:.1f} MiB serialised in "
        f"{formats['serialize_s']:.2f} s)",
        "",
        "| Codec | File | Write | Load (page cache) | Load (from disk) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for codec, row in formats["formats"].items():
        lines.append(
            f"| {codec} | {row['file_bytes'] / 2**20:.2f} MiB | {row['write_s']:.2f} s "
            f"| {row['load_s']:.3f} s | {row['load_cold_s']:.3f} s |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", metavar="SCHEMA_JSON", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--format-reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one round of a smaller schema")
    parser.add_argument("--out-dir", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker)
        return
    schema = QUICK_SCHEMA if args.quick else FULL_SCHEMA
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="grammar-guard-restart-") as folder:
        restarts = measure_restarts(schema, rounds, Path(folder))
        formats = measure_formats(schema, Path(folder), 2 if args.quick else args.format_reps)
    report = {
        "date": date.today().isoformat(),
        "schema": schema,
        "rounds": rounds,
        "restarts": restarts,
        "formats": formats,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "restart.json").write_text(json.dumps(report, indent=2))
    table = markdown(report)
    (args.out_dir / "restart.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
