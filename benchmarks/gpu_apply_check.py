"""One-shot NVIDIA GPU check of the mask apply paths (a few minutes; exits 0 without a GPU).

1. ``GraphSafeBitmaskApplier`` against a reference; 2. its CUDA graph replay; 3. timings against
xgrammar's CUDA kernel; 4. real engines, each runner without and with drafts. docs/benchmarks.md
("Mask apply, CUDA") has the details. Exits non-zero on any failure.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from benchmarks import cli
from harness.fresh import FreshError, run_fresh

from grammar_guard.core.masks.apply import GraphSafeBitmaskApplier
from grammar_guard.core.masks.layout import words_per_row

VOCAB = 129280
BATCH_SIZES = (1, 8, 32, 128)
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TIMED_DTYPES = {name: DTYPES[name] for name in ("float32", "bf16")}


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
    for dtype_name, dtype in TIMED_DTYPES.items():
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
        for dtype_name, dtype in TIMED_DTYPES.items():
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


DRAFTS = (0, 3)  # part 4 starts an engine per runner without and with ngram drafts
NGRAM = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 4}  # drafts' settings
ENGINE_MAX_TOKENS = 128  # the demo's grammars are bounded well below this
REPEATED = "abc abc abc abc abc abc abc abc abc abc"
# Drafts from the prompt propose "abc " again; the grammar allows only two.
WRONG_DRAFTS_REGEX = r"(abc ){2}x{6}"


def engines_of_this_release() -> list[tuple[str, int]]:
    """(runner, drafts) of part 4: vLLM 0.34 deleted the V1 runner (and refuses V2's off)."""
    from grammar_guard.vllm_adapter.compat import installed_release

    runners = ("v2", "v1") if installed_release().v1_model_runner else ("v2",)
    return [(runner, drafts) for runner in runners for drafts in DRAFTS]


def engine_check(argument: list[Any]) -> dict[str, Any]:
    """Start one engine in this (fresh) process, run every constrained request, report it."""
    runner, drafts = argument
    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1" if runner == "v2" else "0"
    from grammar_guard.demo.cases import CASES
    from grammar_guard.demo.engine import start_engine

    # Eager mode: CUDA graphs capture only the forward pass, never the mask apply, and
    # capturing would cost minutes of the device time a lent GPU has.
    overrides: dict[str, Any] = {"enforce_eager": True, "disable_log_stats": False}
    if drafts:
        overrides["speculative_config"] = {**NGRAM, "num_speculative_tokens": drafts}
    llm = start_engine(**overrides)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from grammar_guard.vllm_adapter import fill_hook

    def params(constraint: dict[str, Any], seed: int | None) -> SamplingParams:
        return SamplingParams(
            max_tokens=ENGINE_MAX_TOKENS,
            temperature=0.0 if seed is None else 1.0,
            seed=seed,
            structured_outputs=StructuredOutputsParams(**constraint),
        )

    # (name, check, prompt, sampling): the demo's cases at two seeds, then the drafts' cases.
    requests = [
        (f"{case.name}/seed{seed}", case.check, "Answer: ", params(case.structured_outputs, seed))
        for seed in (1, 2)
        for case in CASES
    ]
    requests += [
        (name, _matches(constraint, expected), f"{REPEATED} {REPEATED}", params(constraint, None))
        for name, constraint, expected in (
            ("drafts-accepted", {"choice": [REPEATED]}, REPEATED),
            ("drafts-forbidden", {"regex": WRONG_DRAFTS_REGEX}, None),
        )
    ]
    prompts = [prompt for _, _, prompt, _ in requests]
    outputs = llm.generate(prompts, [sampling for *_, sampling in requests], use_tqdm=False)
    failures = []
    for (name, check, _, _), output in zip(requests, outputs, strict=True):
        completion = output.outputs[0]
        try:
            if completion.finish_reason != "stop":
                raise AssertionError(f"finished with {completion.finish_reason!r}")
            check(completion.text)
        except Exception as exc:
            failures.append(f"{name}: {exc} ({completion.text!r})")
    core = llm.llm_engine.engine_core.engine_core
    model_runner = core.model_executor.driver_worker.worker.model_runner  # torch.cuda only
    metrics = {metric.name: getattr(metric, "value", None) for metric in llm.get_metrics()}
    return {
        "runner_module": type(model_runner).__module__,
        "outputs": len(outputs),
        "failures": failures,
        "fill_steps": fill_hook.counters.steps,
        "plugin_apply_steps": _plugin_apply_steps(runner),
        "drafts_proposed": metrics.get("vllm:spec_decode_num_draft_tokens") or 0,
    }


def _plugin_apply_steps(runner: str) -> int:
    if runner != "v1":  # the apply hook's module imports the V1 runner
        return 0
    from grammar_guard.vllm_adapter import apply_hook

    return apply_hook.applied_steps()


def _matches(constraint: dict[str, Any], expected: str | None) -> Callable[[str], None]:
    def check(text: str) -> None:
        if expected is not None and text != expected:
            raise AssertionError(f"expected {expected!r}")
        if "regex" in constraint and not re.fullmatch(constraint["regex"], text):
            raise AssertionError(f"does not match {constraint['regex']!r}")

    return check


def engine_problems(runner: str, drafts: int, report: dict[str, Any]) -> list[str]:
    """What is wrong with one engine's report, beyond its own output failures."""
    problems = list(report["failures"])
    v2 = report["runner_module"].startswith("vllm.v1.worker.gpu.")
    if v2 != (runner == "v2"):
        problems.append(f"ran {report['runner_module']}, not the {runner} runner")
    # With drafts, a step whose requests all have drafts is vLLM's loop alone.
    if not drafts and report["fill_steps"] == 0:
        problems.append("the fill hook batched no step")
    # The plugin applies the mask in the V1 runner only; V2 applies it itself.
    if (report["plugin_apply_steps"] > 0) != (runner == "v1"):
        problems.append(f"the plugin's apply ran {report['plugin_apply_steps']} steps")
    if drafts and not report["drafts_proposed"]:
        problems.append("no draft tokens were proposed, so no draft rows were checked")
    return problems


def check_engines(lines: list[str]) -> bool:
    """Run every engine of part 4; its verdicts are printed and kept in ``lines``."""
    ok = True
    for runner, drafts in engines_of_this_release():
        verdict = engine_verdict(runner, drafts)
        print("\n".join(verdict))
        lines += verdict
        ok = ok and verdict[0].startswith("ok")
    return ok


def engine_verdict(runner: str, drafts: int) -> list[str]:
    """One engine's verdict: `ok` or `FAIL`, what it ran; then a line per problem."""
    name = f"engine {runner} runner, {drafts} drafts"
    try:
        report = run_fresh("benchmarks.gpu_apply_check:engine_check", [runner, drafts])
    except FreshError as exc:
        print(exc)
        return [f"FAIL {name}: {str(exc).splitlines()[0]}"]
    problems = engine_problems(runner, drafts, report)
    summary = (
        f"{report['outputs']} outputs, runner {report['runner_module']}, "
        f"{report['fill_steps']} fill steps, {report['plugin_apply_steps']} plugin apply "
        f"steps, {report['drafts_proposed']} draft tokens"
    )
    verdict = f"{'FAIL' if problems else 'ok  '} {name}: {summary}"
    return [verdict, *(f"     {problem}" for problem in problems)]


def main() -> int:
    parser = cli.parser(__doc__)
    parser.add_argument("--part", choices=("all", "kernels", "engines"), default="all")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: gpu_apply_check.py needs an NVIDIA GPU with CUDA; none is available here.")
        return 0
    device = f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    print(device)
    report = [device + "."]
    if args.part in ("all", "kernels"):
        rng = np.random.default_rng(0)
        check_correctness(rng)
        check_graph_replay(rng)
        timings = timing_table(rng)
        print(f"\n{timings}\n")
        # Reached only when every correctness and replay check passed: a failure exits.
        report += ["Every eager and graph-replay result equals the reference.", "", timings]
    engines: list[str] = []
    ok = args.part not in ("all", "engines") or check_engines(engines)
    if engines:
        report += ["", "Engines (part 4):", "", *(f"- `{line.strip()}`" for line in engines)]
    cli.write(args.markdown, "\n".join(report) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
