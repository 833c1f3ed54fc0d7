"""After an engine restart: time to first token and to steady-state throughput of a slow schema.

A restart is a fresh engine process (the tiny model, an in-process engine
core). Once it is up and has decoded one unconstrained request, it is sent
the first request for a schema whose long bounded strings make xgrammar's
compile slow (its time to first token, ``max_tokens=1``), then batch after
batch of requests of that schema (seeded, so every batch of one engine
writes the same tokens), each batch's output tokens per second recorded
against the time since that first request. Kinds, one engine each, in turn
within each round, so load from other processes hits all alike:

- vLLM's ``xgrammar`` and ``guidance`` backends (no persistent cache);
- grammar-guard without a cache folder: llguidance serves the key at once,
  and its reuse starts the key's upgrade trial on xgrammar in the background
  (it moves if xgrammar's masks cost it less);
- grammar-guard with ``GRAMMAR_GUARD_CACHE_DIR`` filled by an earlier run,
  which stored the grammar the trial chose: the restart starts on it.

"Steady" is the median rate of a run's last three batches; the time to
steady state is when the first batch at 90% of it or more ended.

The second part measures the cache file formats (``disk_store.CODECS``) on
the schema's grammar from each engine (the folder holds the one the trial
chose; xgrammar's is the large one): file size, write time and load time
(read, decompress, ``deserialize``), from the page cache and after dropping
the file's pages (``posix_fadvise``), median of ``--format-reps``.

    .venv/bin/python benchmarks/bench_restart.py [--rounds 2] [--out-dir bench-out]
    .venv/bin/python benchmarks/bench_restart.py --quick   # the smoke form: short runs

Writes ``restart.json`` and ``restart.md`` to ``--out-dir`` (and the markdown
to ``--markdown`` if given) and prints the markdown.
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

from scoped_env import CLOSED_OBJECTS, scoped_environment

RESULT = "RESULT "
# Long enough for the slowest compile on a loaded 2-core machine: this
# benchmark measures compiles, it must never time one out.
COMPILE_TIMEOUT_S = 1800
KINDS = ("vLLM xgrammar", "vLLM guidance", "grammar-guard", "grammar-guard, cache folder")
_VLLM_BACKENDS = {"vLLM xgrammar": "xgrammar", "vLLM guidance": "guidance"}
BATCH = 16
MAX_TOKENS = 48
STEADY_BATCHES = 3
STEADY_SHARE = 0.9
# How long a run waits for its key's upgrade (seconds of compile at nice +19,
# after the compile worker has started, which a busy machine makes slow).
UPGRADE_WAIT_S = 300.0


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


# Within the background upgrade's budget (routing.UPGRADE_MAX_COMPILE_S), and
# seconds of xgrammar compile: what a cache folder saves a restart.
FULL_SCHEMA = slow_schema(200, 240)
QUICK_SCHEMA = slow_schema(40)


# --- worker: one engine, one restart ---------------------------------------------------


def _worker(kind: str, schema_json: str, duration_s: float, upgrade_wait_s: float) -> None:
    from grammar_guard.demo.engine import start_engine

    overrides: dict[str, Any] = {}
    if kind in _VLLM_BACKENDS:
        overrides["structured_outputs_config"] = {
            "backend": _VLLM_BACKENDS[kind],
            "disable_any_whitespace": True,
        }
    llm = start_engine(**overrides)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    schema = json.loads(schema_json)
    llm.generate(["Warm up: "], [SamplingParams(max_tokens=2)], use_tqdm=False)
    first = SamplingParams(max_tokens=1, structured_outputs=StructuredOutputsParams(json=schema))
    started = time.perf_counter()
    llm.generate(["Write it: "], [first], use_tqdm=False)
    ttft_s = time.perf_counter() - started
    params = [
        SamplingParams(
            max_tokens=MAX_TOKENS,
            temperature=1.0,
            seed=index,
            structured_outputs=StructuredOutputsParams(json=schema),
        )
        for index in range(BATCH)
    ]
    prompts = [f"Record {index}: " for index in range(BATCH)]
    batches = []
    upgrade: dict[str, Any] | None = None
    paused_after: int | None = None  # batches decoded before the pause, if there was one
    while True:
        batch_started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        ended = time.perf_counter()
        tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
        batches.append({"end_s": ended - started, "tok_s": tokens / (ended - batch_started)})
        if upgrade is None and (outcome := _upgrade_outcome(llm, kind)) is not None:
            upgrade = {"outcome": outcome, "at_s": ended - started, "paused": paused_after}
        # A plugin engine's run goes on until its key's upgrade was decided, or
        # the key was loaded from the folder, or it is clear neither happens.
        decided = upgrade is not None or _disk_counts(llm, kind).get("hits", 0) > 0
        done_decoding = ended - started >= duration_s and len(batches) > STEADY_BATCHES
        pause = done_decoding and not decided and paused_after is None and upgrade_wait_s > 0
        if pause and kind.startswith("grammar-guard"):
            # Back-to-back batches keep every core busy, and the upgrade's
            # compile at nice +19 gets next to none of them (on a slow day it was
            # undecided after 300 s): pause, as a server between bursts does,
            # then decode a steady state on whichever grammar won.
            _service(llm).drain(upgrade_wait_s)
            paused_after = len(batches)
            continue
        resumed = paused_after is not None and len(batches) >= paused_after + STEADY_BATCHES
        settled = decided or kind in _VLLM_BACKENDS or resumed or upgrade_wait_s == 0
        if done_decoding and settled and (paused_after is None or resumed):
            break
    if kind.startswith("grammar-guard"):
        _service(llm).drain()  # a filling run's file is complete before the process ends
    print(
        RESULT
        + json.dumps(
            {
                "ttft_s": ttft_s,
                "batches": batches,
                "upgrade": upgrade,
                # The last batch as decoded, for a check that it satisfies the schema.
                "outputs": [
                    {
                        "text": output.outputs[0].text,
                        "finish_reason": output.outputs[0].finish_reason,
                    }
                    for output in outputs
                ],
                **_disk_counts(llm, kind),
            }
        ),
        flush=True,
    )


def _service(llm: Any) -> Any:
    # This engine's own numbers: metrics_snapshot() would add those other
    # engine processes on the machine left in the metrics folder.
    return llm.llm_engine.engine_core.engine_core.structured_output_manager.backend.service


def _upgrade_outcome(llm: Any, kind: str) -> str | None:
    """How the key's upgrade ended (done, slower, failed, dropped); None while undecided."""
    if not kind.startswith("grammar-guard"):
        return None
    from grammar_guard.core.metrics import LabelledCounter

    counts = _service(llm).metrics.snapshot().labelled_values(LabelledCounter.UPGRADES)
    return next(iter(counts), None)


def _disk_counts(llm: Any, kind: str) -> dict[str, int]:
    if not kind.startswith("grammar-guard"):
        return {}
    numbers = _service(llm).metrics.snapshot().as_dict()
    return {
        name: int(numbers[f"grammar_guard_disk_{name}_total"])
        for name in ("hits", "misses", "writes", "errors")
    }


def _restart(
    kind: str, schema: dict[str, Any], folder: Path, duration_s: float, upgrade_wait_s: float
) -> dict[str, Any]:
    """Start a fresh engine process of ``kind`` and measure it on ``schema``."""
    env = {
        **os.environ,
        "GRAMMAR_GUARD_COMPILE_TIMEOUT_S": str(COMPILE_TIMEOUT_S),
        **CLOSED_OBJECTS,
    }
    env.pop("GRAMMAR_GUARD_CACHE_DIR", None)
    if kind == "grammar-guard, cache folder":
        env["GRAMMAR_GUARD_CACHE_DIR"] = str(folder)
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            kind,
            json.dumps(schema),
            str(duration_s),
            str(upgrade_wait_s),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not results:
        raise RuntimeError(f"{kind} engine process failed:\n{(done.stdout + done.stderr)[-6000:]}")
    return dict(json.loads(results[-1].removeprefix(RESULT)))


def steady(run: dict[str, Any]) -> tuple[float, float]:
    """The run's steady rate and the time the first batch reaching 90% of it ended."""
    rates = [batch["tok_s"] for batch in run["batches"]]
    rate = statistics.median(rates[-STEADY_BATCHES:])
    reached = next(b["end_s"] for b in run["batches"] if b["tok_s"] >= STEADY_SHARE * rate)
    return rate, reached


def measure_restarts(
    schema: dict[str, Any],
    rounds: int,
    folder: Path,
    duration_s: float,
    *,
    kinds: tuple[str, ...] = KINDS,
    upgrade_wait_s: float = UPGRADE_WAIT_S,
) -> dict[str, Any]:
    # Fills the folder: runs until its key's upgrade was decided, so the folder
    # holds the grammar a restart should start on.
    fill = _restart("grammar-guard, cache folder", schema, folder, duration_s, upgrade_wait_s)
    if fill["misses"] != 1 or (upgrade_wait_s and fill["upgrade"] is None):
        raise RuntimeError(f"the filling run did not compile and decide its upgrade: {fill}")
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for round_ in range(rounds):
        for kind in kinds:
            run = _restart(kind, schema, folder, duration_s, upgrade_wait_s)
            runs[kind].append(run)
            print(
                f"round {round_ + 1}/{rounds}: {kind}: TTFT {run['ttft_s']:.2f} s, "
                f"steady {steady(run)[0]:.0f} tok/s from {steady(run)[1]:.1f} s",
                file=sys.stderr,
            )
        loading = runs.get(KINDS[-1], [])
        if loading and loading[-1]["hits"] != 1:
            raise RuntimeError(f"a cache-folder run compiled instead of loading: {loading}")
    return {"fill_upgrade": fill["upgrade"], "fill": fill, "runs": runs}


# --- cache file formats ----------------------------------------------------------------


def _drop_from_page_cache(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def measure_formats(schema: dict[str, Any], folder: Path, reps: int) -> dict[str, Any]:
    """Every codec on this schema's grammar from each engine, and which one ``folder`` holds.

    Both engines, not only the stored one: an llguidance grammar is a few kB of
    text and tells nothing about the codecs, while xgrammar's, the one an
    upgrade stores, runs to megabytes for this schema.
    """
    from grammar_guard.core.compile.disk_store import DiskStore
    from grammar_guard.core.metrics import CacheMetrics

    engine, spec = _engine_and_spec(schema, "auto")
    stored = DiskStore(folder, engine, max_bytes=1 << 40, metrics=CacheMetrics()).load(spec)
    if stored is None:
        raise RuntimeError(f"no stored grammar for the schema in {folder}")
    return {
        "stored_engine": stored.engine_name,
        "grammars": {name: _codecs_on(schema, name, reps) for name in ("xgrammar", "llguidance")},
    }


def _engine_and_spec(schema: dict[str, Any], selection: str) -> tuple[Any, Any]:
    """The tiny model's engine under ``GRAMMAR_GUARD_ENGINE=selection``, and the schema's key."""
    from grammar_guard.cli.model import ModelArgs, load_engine
    from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
    from grammar_guard.core.settings import ENGINE_VARIABLE, Settings
    from grammar_guard.demo.engine import STRUCTURED_OUTPUTS_CONFIG
    from grammar_guard.demo.tiny_model import build_tiny_model

    with scoped_environment({ENGINE_VARIABLE: selection}):
        settings = Settings.from_env()
        engine = load_engine(
            ModelArgs(model=str(build_tiny_model())), unenforced=settings.unenforced
        )
    compact = CompileOptions(any_whitespace=not STRUCTURED_OUTPUTS_CONFIG["disable_any_whitespace"])
    return engine, GrammarSpec.build(RequestKind.JSON_SCHEMA, schema, compact)


def _codecs_on(schema: dict[str, Any], selection: str, reps: int) -> dict[str, Any]:
    """Each codec's file size, write time and load times on the schema compiled by one engine."""
    from grammar_guard.core.compile.disk_store import CODECS, DiskStore
    from grammar_guard.core.metrics import CacheMetrics

    engine, spec = _engine_and_spec(schema, selection)
    compiled = engine.compile(spec)
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
            print(f"{selection} format {codec}: {formats[codec]}", file=sys.stderr)
    return {
        "memory_bytes": compiled.memory_bytes,
        "serialized_bytes": len(raw),
        "serialize_s": serialize_s,
        "formats": formats,
    }


# --- report ----------------------------------------------------------------------------


def _landed(upgrade: dict[str, Any]) -> str:
    pause = " (after a pause in decoding)" if upgrade.get("paused") is not None else ""
    return f"{upgrade['outcome']} at {upgrade['at_s']:.1f} s{pause}"


def markdown(report: dict[str, Any]) -> str:
    runs, formats = report["restarts"]["runs"], report["formats"]
    lengths = ", ".join(str(p["maxLength"]) for p in report["schema"]["properties"].values())
    lines = [
        f"Schema with strings of maxLength {lengths}; tiny model, a fresh engine per run, "
        f"{report['rounds']} round(s); batches of {BATCH} requests, `max_tokens={MAX_TOKENS}`, "
        "seeded sampling; medians over rounds.",
        "",
        "| Engine after restart | TTFT | first batch tok/s | steady tok/s "
        "| time to steady state | upgrade |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, kind_runs in runs.items():
        steadies = [steady(run) for run in kind_runs]
        decided = [run["upgrade"] for run in kind_runs if run.get("upgrade")]
        landed = ", ".join(_landed(up) for up in decided) or "-"
        lines.append(
            f"| {kind} | {statistics.median(run['ttft_s'] for run in kind_runs):.2f} s "
            f"| {statistics.median(run['batches'][0]['tok_s'] for run in kind_runs):.0f} "
            f"| {statistics.median(rate for rate, _ in steadies):.0f} "
            f"| {statistics.median(at for _, at in steadies):.1f} s | {landed} |"
        )
    fill_upgrade = report["restarts"]["fill_upgrade"] or {"outcome": "undecided"}
    lines += [
        "",
        f"The filling run's upgrade: {fill_upgrade['outcome']}, so the folder holds the "
        f"{formats['stored_engine']} grammar.",
        "",
        "#### Cache file formats, on this schema's grammar from each engine",
        "",
    ]
    for name, grammar in formats["grammars"].items():
        lines.append(
            f"- {name}: {grammar['memory_bytes'] / 2**20:.2f} MiB in memory, "
            f"{grammar['serialized_bytes'] / 2**20:.2f} MiB serialised in "
            f"{grammar['serialize_s']:.2f} s"
        )
    lines += [
        "",
        "| Grammar | Codec | File | Write | Load (page cache) | Load (from disk) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, grammar in formats["grammars"].items():
        for codec, row in grammar["formats"].items():
            lines.append(
                f"| {name} | {codec} | {row['file_bytes'] / 2**20:.2f} MiB "
                f"| {row['write_s']:.2f} s | {row['load_s']:.3f} s | {row['load_cold_s']:.3f} s |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of batches per run")
    parser.add_argument("--format-reps", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one short round, a smaller schema")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CI's form: --quick, restarted from the cache folder only, no wait for an upgrade",
    )
    parser.add_argument("--out-dir", type=Path, default=Path("bench-out"))
    parser.add_argument("--markdown", type=Path, help="also write the tables here")
    args = parser.parse_args()
    if args.worker:
        kind, schema_json, duration, upgrade_wait = args.worker
        _worker(kind, schema_json, float(duration), float(upgrade_wait))
        return
    quick = args.quick or args.smoke
    schema = QUICK_SCHEMA if quick else FULL_SCHEMA
    rounds = 1 if quick else args.rounds
    duration_s = 3.0 if quick else args.duration
    with tempfile.TemporaryDirectory(prefix="grammar-guard-restart-") as folder:
        restarts = measure_restarts(
            schema,
            rounds,
            Path(folder),
            duration_s,
            kinds=KINDS[-1:] if args.smoke else KINDS,
            upgrade_wait_s=0.0 if args.smoke else UPGRADE_WAIT_S,
        )
        formats = measure_formats(schema, Path(folder), 2 if quick else args.format_reps)
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
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
