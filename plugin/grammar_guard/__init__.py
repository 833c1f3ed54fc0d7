"""vllm-grammar-guard: a structured-output backend for vLLM on xgrammar and llguidance.

Importing this package has no side effects on vLLM; :func:`register` (the
``vllm.general_plugins`` entry point) is what installs the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grammar_guard.core.errors import CompileTimeoutError, InvalidGrammarError

if TYPE_CHECKING:
    from grammar_guard.core.metrics import MetricsSnapshot

__version__ = "0.1.0"

BACKEND_NAME = "grammar-guard"


def register() -> None:
    """Make ``grammar-guard`` selectable in this process (idempotent).

    vLLM calls this in every process through the ``vllm.general_plugins`` entry
    point. ``LLM(...)`` validates its ``structured_outputs_config`` before it
    loads plugins, so offline users call this once before building ``LLM``.
    """
    from grammar_guard.vllm_adapter.registration import install

    install()


def metrics_snapshot() -> MetricsSnapshot:
    """The compile-cache metrics that ``/metrics`` serves, read in this process.

    Sums this process's caches (an in-process engine) and those of the engine
    processes it started. Index by exported name, for example
    ``metrics_snapshot()["grammar_guard_cache_hits_total"]``.
    """
    from grammar_guard.vllm_adapter.metrics_export import metrics_snapshot as read

    return read()


__all__ = [
    "BACKEND_NAME",
    "CompileTimeoutError",
    "InvalidGrammarError",
    "__version__",
    "metrics_snapshot",
    "register",
]
