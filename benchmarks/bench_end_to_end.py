"""Decode throughput of the tiny model on a real engine: vLLM's xgrammar backend against ours.

Each backend runs in its own subprocess (one engine per process), on the same
in-process engine settings (``grammar_guard.demo.engine``), with compact JSON
for both. Two batches of constrained requests with bounded schemas: "mixed"
(a quarter of the requests write a ``"maxLength": 300`` string, the rest
small objects) and "long strings" (all of them write that string). They are
decoded with seeded sampling (a seed per request, so the random model keeps
writing inside strings rather than closing them at once). The same seeds
under the same masks give the same tokens, so both sides do the same work;
the table shows the counts.

Both engines stay up and take turns, one timed batch at a time, so load from
other processes on the machine hits both alike; each reports the median of
its ``--runs`` batches per workload, after one untimed warm-up batch
(grammar compiles, first steps).

    .venv/bin/python benchmarks/bench_end_to_end.py [--requests 32] [--max-tokens 64] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from typing import Any

BACKENDS = ("xgrammar", "grammar-guard")
LONG_STRING = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 300}},
    "required": ["text"],
}
MIXED: tuple[dict[str, Any], ...] = (
    LONG_STRING,
    {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
        "required": ["color", "n"],
    },
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
    },
    {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 8}},
        "required": ["tags"],
    },
)
WORKLOADS: dict[str, tuple[dict[str, Any], ...]] = {
    "mixed": MIXED,
    "long strings": (LONG_STRING,),
}
# Marks the worker's answers among vLLM's log lines, which also go to stdout.
RESULT = "RESULT"


# --- worker: one engine, one timed batch per line read from stdin ---


def _worker(backend: str, requests: int, max_tokens: int) -> None:
    from grammar_guard.demo.engine import start_engine

    overrides: dict[str, Any] = {}
    if backend != "grammar-guard":
        overrides["structured_outputs_config"] = {
            "backend": backend,
            "disable_any_whitespace": True,
        }
    llm = start_engine(**overrides)
    batches = {name: _batch(schemas, requests, max_tokens) for name, schemas in WORKLOADS.items()}
    for prompts, params in batches.values():
        llm.generate(prompts, params, use_tqdm=False)  # warm-up: compiles, first steps
    print(RESULT, "ready", flush=True)
    for line in sys.stdin:
        prompts, params = batches[line.strip()]
        started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - started
        tokens = sum(len(output.outputs[0].token_ids) for output in outputs)
        print(RESULT, json.dumps({"tokens": tokens, "seconds": seconds}), flush=True)


def _batch(
    schemas: tuple[dict[str, Any], ...], requests: int, max_tokens: int
) -> tuple[list[str], list[Any]]:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    prompts = [f"Request {i}: " for i in range(requests)]
    params = [
        SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0,
            seed=i,
            structured_outputs=StructuredOutputsParams(json=schemas[i % len(schemas)]),
        )
        for i in range(requests)
    ]
    return prompts, params


# --- parent: start both workers, alternate batches, print the table ---


class Worker:
    def __init__(self, backend: str, args: argparse.Namespace) -> None:
        self.backend = backend
        command = [sys.executable, __file__, "--worker", backend]
        command += ["--requests", str(args.requests), "--max-tokens", str(args.max_tokens)]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def _answer(self) -> str:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith(RESULT + " "):
                return line.removeprefix(RESULT + " ").strip()
        raise RuntimeError(f"the {self.backend} worker exited (see its stderr above)")

    def wait_ready(self) -> None:
        self._answer()

    def run(self, workload: str) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(workload + "\n")
        self._process.stdin.flush()
        return dict(json.loads(self._answer()))

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(timeout=120)


def _measure(workers: list[Worker], runs: int) -> dict[tuple[str, str], dict[str, Any]]:
    seconds: dict[tuple[str, str], list[float]] = {}
    tokens: dict[tuple[str, str], int] = {}
    for turn in range(runs):
        for workload in WORKLOADS:
            order = workers if turn % 2 == 0 else workers[::-1]
            for worker in order:
                result = worker.run(workload)
                seconds.setdefault((worker.backend, workload), []).append(result["seconds"])
                tokens[(worker.backend, workload)] = result["tokens"]
    return {
        key: {"tokens": tokens[key], "seconds": statistics.median(values)}
        for key, values in seconds.items()
    }


def _rate(result: dict[str, Any]) -> float:
    return float(result["tokens"] / result["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.requests, args.max_tokens)
        return

    workers = [Worker(backend, args) for backend in BACKENDS]
    try:
        for worker in workers:
            worker.wait_ready()
        results = _measure(workers, args.runs)
    finally:
        for worker in workers:
            worker.close()
    print(
        f"Tiny model, {args.requests} constrained requests, seeded sampling, "
        f"max_tokens={args.max_tokens}, median of {args.runs} runs, {date.today()}"
    )
    print()
    print("| workload | backend | output tokens | seconds | tokens/s | vs xgrammar |")
    print("|---|---|---:|---:|---:|---:|")
    for workload in WORKLOADS:
        baseline = _rate(results[("xgrammar", workload)])
        for backend in BACKENDS:
            result = results[(backend, workload)]
            print(
                f"| {workload} | {backend} | {result['tokens']} | {result['seconds']:.2f} "
                f"| {_rate(result):.1f} | {_rate(result) / baseline:.2f}x |"
            )


if __name__ == "__main__":
    main()
