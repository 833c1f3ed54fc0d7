"""CPU benchmark of the mask apply path: vLLM's and xgrammar's against the plugin's.

Run: ``.venv/bin/python -m benchmarks.bench_apply [--threads N] [--repeats N]
[--batch-sizes 1 8 32 128] [--markdown PATH]``

For each batch size, logits dtype and kind of mask it times, in one process:

* the whole apply step: vLLM's real ``apply_grammar_bitmask`` against the
  plugin's hook (``RunnerApply.apply``), both given the same scheduler output,
  grammar output (requests in an order other than the batch's) and logits;
* the kernels alone: ``xgrammar.apply_token_bitmask_inplace`` against the
  plugin's ``CpuBitmaskApplier``, rows already in order;
* a copy of the same logits, and a large copy for the machine's memory
  bandwidth; the plugin kernel's logits traffic (read + write) is reported as
  a share of that bandwidth;
* the whole apply step again, each run after ``GAP_MS`` of other Python work,
  as in an engine, where a forward pass and the scheduler run between two
  applies: back to back, a step of many small torch ops runs faster than it
  ever does there;
* the CPU kernel's two strategies apart, after the same gap, at small
  batches: the byte-table kernel against the torch kernels (dense or by
  words, as they choose), which is where ``TABLE_KERNEL_ROWS`` comes from.

Mask kinds: ``random`` (every word mixed, the plugin's worst case), ``string``
(66% all-allowed words, 34% mixed: a JSON string state of the 129k-token
tokenizer) and ``structure`` (99% all-forbidden words: between JSON tokens).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
import xgrammar
from vllm.v1.core.sched.output import GrammarOutput, SchedulerOutput
from vllm.v1.structured_output.utils import apply_grammar_bitmask

from grammar_guard.core.masks.apply import TABLE_KERNEL_ROWS, CpuBitmaskApplier
from grammar_guard.core.masks.byte_table import ByteTableKernel, table_operands
from grammar_guard.core.masks.layout import words_per_row
from grammar_guard.demo.tiny_model import default_model_dir
from grammar_guard.vllm_adapter.apply_hook import RunnerApply

BATCH_SIZES = (1, 8, 32, 128)
# Run lengths around the byte-table kernel's limit.
CROSSOVER_BATCHES = (1, 2, 4, 8, 16)
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}
MASK_KINDS = ("random", "string", "structure")
# Share of all-allowed (-1) and all-forbidden (0) words per kind; the rest is mixed.
UNIFORM_SHARES = {"random": (0.0, 0.0), "string": (0.66, 0.0), "structure": (0.0, 0.99)}
FALLBACK_VOCAB = 129280  # the tiny model's tokenizer, when the model is not built yet
# Other work before each "after a gap" run: about one engine step of the tiny model here.
GAP_MS = 5.0


@dataclass(frozen=True)
class Row:
    batch: int
    dtype: str
    kind: str
    vllm_ms: float
    hook_ms: float
    vllm_gap_ms: float
    hook_gap_ms: float
    xgrammar_ms: float
    kernel_ms: float
    copy_ms: float
    logits_bytes: int

    def kernel_gbps(self) -> float:
        return 2 * self.logits_bytes / (self.kernel_ms * 1e-3) / 1e9


def vocab_size() -> int:
    config = default_model_dir() / "config.json"
    if config.exists():
        return int(json.loads(config.read_text())["vocab_size"])
    return FALLBACK_VOCAB


def other_work(ms: float) -> None:
    """Run Python for ``ms`` milliseconds, as an engine does between two applies."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def median_ms(step: Callable[[], object], repeats: int, *, gap_ms: float = 0.0) -> float:
    step()  # warm-up: first-touch of buffers, lazy imports
    times = []
    for _ in range(repeats):
        if gap_ms:
            other_work(gap_ms)
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def memory_bandwidth_gbps(repeats: int) -> float:
    """Read + write bytes per second of a 512 MiB copy (far beyond any cache)."""
    source = torch.ones(128 * 2**20, dtype=torch.float32)
    target = torch.empty_like(source)
    ms = median_ms(lambda: target.copy_(source), repeats)
    return 2 * source.numel() * 4 / (ms * 1e-3) / 1e9


def make_bitmask(rng: np.random.Generator, rows: int, vocab: int, kind: str) -> np.ndarray:
    shape = (rows, words_per_row(vocab))
    words = rng.integers(-(2**31), 2**31, size=shape, dtype=np.int64).astype(np.int32)
    allowed_share, forbidden_share = UNIFORM_SHARES[kind]
    draw = rng.random(shape)
    words[draw < allowed_share] = -1
    words[(draw >= allowed_share) & (draw < allowed_share + forbidden_share)] = 0
    return words


def step_inputs(
    rng: np.random.Generator, batch: int, bitmask: np.ndarray
) -> tuple[SchedulerOutput, GrammarOutput, Any]:
    """Every request constrained, the grammar order a shuffle of the batch order."""
    req_ids = [f"req-{i}" for i in range(batch)]
    grammar_ids = [req_ids[i] for i in rng.permutation(batch)]
    input_batch = SimpleNamespace(
        req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}
    )
    return SchedulerOutput.make_empty(), GrammarOutput(grammar_ids, bitmask), input_batch


def measure(batch: int, dtype_name: str, kind: str, vocab: int, repeats: int) -> Row:
    rng = np.random.default_rng(batch)
    dtype = DTYPES[dtype_name]
    logits = torch.randn((batch, vocab)).to(dtype)
    source = logits.clone()
    bitmask = make_bitmask(rng, batch, vocab, kind)
    scheduler_output, grammar_output, input_batch = step_inputs(rng, batch, bitmask)
    hook = RunnerApply(max_rows=batch)
    kernel = CpuBitmaskApplier(batch, vocab)
    mask_tensor = torch.from_numpy(bitmask)

    def vllm_apply() -> None:
        apply_grammar_bitmask(scheduler_output, grammar_output, input_batch, logits)

    def hook_apply() -> None:
        hook.apply(scheduler_output, grammar_output, input_batch, logits)

    return Row(
        batch=batch,
        dtype=dtype_name,
        kind=kind,
        vllm_ms=median_ms(vllm_apply, repeats),
        hook_ms=median_ms(hook_apply, repeats),
        vllm_gap_ms=median_ms(vllm_apply, repeats, gap_ms=GAP_MS),
        hook_gap_ms=median_ms(hook_apply, repeats, gap_ms=GAP_MS),
        xgrammar_ms=median_ms(
            lambda: xgrammar.apply_token_bitmask_inplace(logits, mask_tensor), repeats
        ),
        kernel_ms=median_ms(lambda: kernel.apply(logits, mask_tensor, None), repeats),
        copy_ms=median_ms(lambda: logits.copy_(source), repeats),
        logits_bytes=logits.numel() * logits.element_size(),
    )


@dataclass(frozen=True)
class CrossoverRow:
    batch: int
    dtype: str
    kind: str
    table_ms: float
    torch_ms: float


def measure_crossover(
    batch: int, dtype_name: str, kind: str, vocab: int, repeats: int
) -> CrossoverRow:
    rng = np.random.default_rng(batch)
    logits = torch.randn((batch, vocab)).to(DTYPES[dtype_name])
    bitmask = torch.from_numpy(make_bitmask(rng, batch, vocab, kind))
    table = ByteTableKernel(batch, vocab)
    torch_kernels = CpuBitmaskApplier(batch, vocab, table_rows=0)

    def table_apply() -> None:
        operands = table_operands(logits, bitmask)
        assert operands is not None
        table.apply(operands, 0, 0, batch)

    return CrossoverRow(
        batch=batch,
        dtype=dtype_name,
        kind=kind,
        table_ms=median_ms(table_apply, repeats, gap_ms=GAP_MS),
        torch_ms=median_ms(
            lambda: torch_kernels.apply(logits, bitmask, None), repeats, gap_ms=GAP_MS
        ),
    )


def _table_rows() -> str:
    return ", ".join(f"{TABLE_KERNEL_ROWS[DTYPES[name]]} ({name})" for name in DTYPES)


def crossover_table(rows: list[CrossoverRow]) -> str:
    lines = [
        f"CPU kernel strategies apart, each run after {GAP_MS:g} ms of Python; runs of at most "
        f"{_table_rows()} rows use the byte table:",
        "",
        "| batch | dtype | mask | byte table ms | torch kernels ms | torch / table |",
        "|---:|---|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r.batch} | {r.dtype} | {r.kind} | {r.table_ms:.3f} | {r.torch_ms:.3f} "
        f"| {r.torch_ms / r.table_ms:.2f}x |"
        for r in rows
    ]
    return "\n".join(lines)


def markdown_table(rows: list[Row], bandwidth: float) -> str:
    lines = [
        "| batch | dtype | mask | vLLM apply ms | plugin apply ms | speed-up "
        f"| after {GAP_MS:g} ms of Python: vLLM ms | plugin ms | speed-up "
        "| xgrammar kernel ms | plugin kernel ms | speed-up | logits copy ms "
        "| plugin GB/s | % of bandwidth |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.batch} | {r.dtype} | {r.kind} | {r.vllm_ms:.3f} | {r.hook_ms:.3f} "
            f"| {r.vllm_ms / r.hook_ms:.1f}x | {r.vllm_gap_ms:.3f} | {r.hook_gap_ms:.3f} "
            f"| {r.vllm_gap_ms / r.hook_gap_ms:.1f}x | {r.xgrammar_ms:.3f} | {r.kernel_ms:.3f} "
            f"| {r.xgrammar_ms / r.kernel_ms:.1f}x | {r.copy_ms:.3f} "
            f"| {r.kernel_gbps():.1f} | {100 * r.kernel_gbps() / bandwidth:.0f}% |"
        )
    return "\n".join(lines)


def goals(rows: list[Row], bandwidth: float) -> str:
    """Whether each goal holds for every batch from 8 up, per mask kind."""
    lines = []
    for kind in MASK_KINDS:
        large = [r for r in rows if r.kind == kind and r.batch >= 8]
        if not large:
            lines.append(f"- {kind}: no batch of 8 or more measured, so no goal is judged")
            continue
        speedup = min(r.xgrammar_ms / r.kernel_ms for r in large)
        share = min(r.kernel_gbps() / bandwidth for r in large)
        lines.append(
            f"- {kind}: kernel speed-up over xgrammar >= 4x from batch 8: "
            f"{'met' if speedup >= 4 else 'NOT met'} (worst {speedup:.1f}x); "
            f">= 50% of memory bandwidth: {'met' if share >= 0.5 else 'NOT met'} "
            f"(worst {100 * share:.0f}%)"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (xgrammar's CPU kernel uses one; default 1)",
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    parser.add_argument("--crossover-batches", type=int, nargs="*", default=list(CROSSOVER_BATCHES))
    parser.add_argument("--markdown", type=Path, help="also write the report to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vocab = vocab_size()
    bandwidth = memory_bandwidth_gbps(args.repeats)
    rows = [
        measure(batch, dtype, kind, vocab, args.repeats)
        for batch in args.batch_sizes
        for dtype in DTYPES
        for kind in MASK_KINDS
    ]
    crossover = [
        measure_crossover(batch, dtype, kind, vocab, args.repeats)
        for batch in args.crossover_batches
        for dtype in DTYPES
        for kind in MASK_KINDS
    ]
    report = "\n".join(
        [
            f"{datetime.date.today()} {platform.processor() or platform.machine()}, "
            f"torch {torch.__version__}, {args.threads} thread(s), vocab {vocab}, "
            f"memory bandwidth (512 MiB copy, read+write) {bandwidth:.1f} GB/s, "
            f"median of {args.repeats} runs per cell.",
            "",
            markdown_table(rows, bandwidth),
            "",
            "Goals:",
            "",
            goals(rows, bandwidth),
            "",
            crossover_table(crossover),
            "",
        ]
    )
    print(report)
    if args.markdown:
        args.markdown.write_text(report)


if __name__ == "__main__":
    main()
