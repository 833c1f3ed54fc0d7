"""One-shot NVIDIA GPU check of the graph-safe mask apply path (runs in about a minute).

Run on a machine with CUDA: ``.venv/bin/python benchmarks/gpu_apply_check.py``

1. Correctness: ``GraphSafeBitmaskApplier`` against a reference on the GPU,
   for float32/bf16/fp16, vocabularies that are not multiples of 32, logits
   wider than the mask, and constrained rows mixed with free ones.
2. CUDA graph: ``apply_staged`` is captured once, then new masks and row maps
   are staged into the static buffers and the graph is replayed; each replay
   is checked against the reference.
3. Timing at vocab 129280 for batches 1/8/32/128: the eager path, the graph
   replay and ``stage`` (host part), against xgrammar's CUDA kernel.

Exits non-zero on the first wrong result, and at once when there is no GPU.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from grammar_guard.core.bitmask import words_per_row
from grammar_guard.core.bitmask_apply import GraphSafeBitmaskApplier

VOCAB = 129280
BATCH_SIZES = (1, 8, 32, 128)
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TIMED_DTYPES = ("float32", "bf16")


def reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """Unpack every bit on the device and set forbidden logits to -inf, row by row."""
    out = logits.clone()
    columns = min(logits.shape[1], bitmask.shape[1] * 32)
    shifts = torch.arange(32, device=logits.device)
    allowed = ((bitmask.to(logits.device).long().unsqueeze(-1) >> shifts) & 1).bool()
    allowed = allowed.view(bitmask.shape[0], -1)[:, :columns]
    for mask_row, logits_row in enumerate(rows.tolist()):
        out[logits_row, :columns][~allowed[mask_row]] = float("-inf")
    return out


def random_case(
    rng: np.random.Generator, num_logits: int, vocab: int, width: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    rows = rng.permutation(num_logits)[: max(1, num_logits - num_logits // 4)]
    words = rng.integers(-(2**31), 2**31, size=(rows.size, words_per_row(vocab)))
    uniform = rng.random(words.shape)
    words[uniform < 0.3] = 0
    words[(uniform >= 0.3) & (uniform < 0.6)] = -1
    bitmask = torch.from_numpy(words.astype(np.int32))
    logits = torch.randn((num_logits, width), device="cuda").to(dtype)
    return logits, bitmask, rows


def check_equal(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    lane = torch.int32 if got.dtype == torch.float32 else torch.int16
    if not torch.equal(got.view(lane), expected.view(lane)):
        wrong = int((got.view(lane) != expected.view(lane)).sum())
        sys.exit(f"FAIL {name}: {wrong} logits differ from the reference")
    print(f"ok   {name}")


def check_correctness(rng: np.random.Generator) -> None:
    for dtype_name, dtype in DTYPES.items():
        for vocab, width in ((1, 1), (33, 33), (1000, 1007), (VOCAB, VOCAB), (VOCAB, VOCAB + 64)):
            applier = GraphSafeBitmaskApplier(16, vocab, "cuda")
            logits, bitmask, rows = random_case(rng, 9, vocab, width, dtype)
            expected = reference(logits, bitmask, rows)
            applier.apply(logits, bitmask, rows)
            torch.cuda.synchronize()
            check_equal(f"eager {dtype_name} vocab={vocab} width={width}", logits, expected)


def check_graph_replay(rng: np.random.Generator) -> None:
    num_logits = 32
    for dtype_name in TIMED_DTYPES:
        dtype = DTYPES[dtype_name]
        applier = GraphSafeBitmaskApplier(num_logits, VOCAB, "cuda")
        static_logits = torch.empty((num_logits, VOCAB), device="cuda", dtype=dtype)
        _, bitmask, rows = random_case(rng, num_logits, VOCAB, VOCAB, dtype)
        applier.stage(bitmask, rows, num_logits)
        graph = capture(functools.partial(applier.apply_staged, static_logits))
        for replay in range(3):
            fresh, bitmask, rows = random_case(rng, num_logits, VOCAB, VOCAB, dtype)
            static_logits.copy_(fresh)
            expected = reference(fresh, bitmask, rows)
            applier.stage(bitmask, rows, num_logits)
            graph.replay()
            torch.cuda.synchronize()
            check_equal(f"graph replay {replay} {dtype_name}", static_logits, expected)


def capture(work: Callable[[], None]) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()  # warm-up outside the graph, as CUDA graph capture requires
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    torch.cuda.synchronize()
    return graph


def device_us(work: Callable[[], object], repeats: int = 200) -> float:
    for _ in range(10):
        work()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        work()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats * 1e3


def host_us(work: Callable[[], object], repeats: int = 200) -> float:
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(repeats):
        work()
    torch.cuda.synchronize()
    return (time.perf_counter() - begin) / repeats * 1e6


def timing_table(rng: np.random.Generator) -> str:
    import xgrammar

    lines = [
        "| batch | dtype | xgrammar kernel us | plugin eager us | plugin graph us "
        "| graph speed-up | stage (host) us | plugin graph GB/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for batch in BATCH_SIZES:
        for dtype_name in TIMED_DTYPES:
            dtype = DTYPES[dtype_name]
            logits = torch.randn((batch, VOCAB), device="cuda").to(dtype)
            words = rng.integers(-(2**31), 2**31, size=(batch, words_per_row(VOCAB)))
            bitmask = torch.from_numpy(words.astype(np.int32))
            device_mask = bitmask.cuda()
            applier = GraphSafeBitmaskApplier(batch, VOCAB, "cuda")
            applier.stage(bitmask, None, batch)
            apply_staged = functools.partial(applier.apply_staged, logits)
            graph = capture(apply_staged)
            xgr = device_us(
                functools.partial(xgrammar.apply_token_bitmask_inplace, logits, device_mask)
            )
            eager = device_us(apply_staged)
            replay = device_us(graph.replay)
            stage = host_us(functools.partial(applier.stage, bitmask, None, batch))
            gbps = 2 * logits.numel() * logits.element_size() / (replay * 1e-6) / 1e9
            lines.append(
                f"| {batch} | {dtype_name} | {xgr:.1f} | {eager:.1f} | {replay:.1f} "
                f"| {xgr / replay:.2f}x | {stage:.1f} | {gbps:.0f} |"
            )
    return "\n".join(lines)


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("gpu_apply_check.py needs an NVIDIA GPU with CUDA; none is available here.")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rng = np.random.default_rng(0)
    check_correctness(rng)
    check_graph_replay(rng)
    print()
    print(timing_table(rng))


if __name__ == "__main__":
    main()
