"""Start vLLM with grammar-guard on the tiny model: the demo's and the tests' one recipe."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from grammar_guard.demo.tiny_model import build_tiny_model

if TYPE_CHECKING:
    from vllm import LLM

# Engine settings that fit the tiny model on a small CPU-only machine.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
ENGINE_KWARGS: dict[str, object] = {
    "max_model_len": 1024,
    "max_num_seqs": 32,
    "gpu_memory_utilization": 0.3,
    "seed": 0,
}


def _apply_engine_env() -> None:
    for name, value in ENGINE_ENV.items():
        os.environ.setdefault(name, value)


STRUCTURED_OUTPUTS_CONFIG = {"backend": "grammar-guard", "disable_any_whitespace": True}


def start_engine(model: str | None = None, *, multiprocess: bool = False, **overrides: Any) -> LLM:
    """An ``LLM`` using grammar-guard with compact JSON; ``overrides`` are more ``LLM`` arguments.

    ``multiprocess=False`` runs the engine core in this process (the fast
    path for one script); ``True`` spawns it, as vLLM does by default.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocess else "0"
    _apply_engine_env()
    import grammar_guard

    grammar_guard.register()  # LLM(...) checks the backend name before vLLM loads plugins
    from vllm import LLM

    arguments: dict[str, Any] = {
        **ENGINE_KWARGS,
        "structured_outputs_config": STRUCTURED_OUTPUTS_CONFIG,
        **({} if multiprocess else {"distributed_executor_backend": "uni"}),
        **overrides,
    }
    return LLM(model=model or str(build_tiny_model()), **arguments)
