"""Where an engine step's time goes: the parts of vLLM's step that structured output touches.

``bench_end_to_end`` times one batch with these clocks on, after its timed
batches (a clock costs about a microsecond a call, and none of the timed
batches pays it). The parts, each a vLLM function timed where it is called:

* ``forward``: the model runner's ``execute_model``;
* ``sampling``: its ``sample_tokens``, less the mask apply inside it;
* ``apply``: ``apply_grammar_bitmask`` (the plugin's hook for grammar-guard);
* ``fill``: the structured-output manager's ``grammar_bitmask``;
* ``scheduler``: the scheduler's ``schedule`` and ``update_from_output``
  (which has the grammar accept each new token);
* ``rest of step``: the rest of ``LLMEngine.step`` (outputs handed over);
* ``outside steps``: the batch's wall time outside any step: requests
  validated and added (the structured-output check of each is there).

Figures are milliseconds per output step of the batch (its longest
request's tokens), as the per-step table counts them; ``steps`` is how many
times the engine stepped, which is more when a request waited for its
grammar with nothing else to run.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

# (owner's module, owner's name or None for a module function, attribute, part)
_CLOCKS = (
    ("vllm.v1.engine.llm_engine", "LLMEngine", "step", "step"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "execute_model", "forward"),
    ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "sample_tokens", "sample_tokens"),
    ("vllm.v1.worker.gpu_model_runner", None, "apply_grammar_bitmask", "apply"),
    ("vllm.v1.structured_output", "StructuredOutputManager", "grammar_bitmask", "fill"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "schedule", "schedule"),
    ("vllm.v1.core.sched.scheduler", "Scheduler", "update_from_output", "update"),
)
PARTS = ("forward", "sampling", "apply", "fill", "scheduler", "rest of step", "outside steps")


def _clocked(original: Callable[..., Any], totals: dict[str, float], part: str) -> Any:
    @functools.wraps(original)
    def clocked(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[part] += time.perf_counter() - started
            totals[part + " calls"] += 1

    return clocked


@contextlib.contextmanager
def clocks_on() -> Iterator[dict[str, float]]:
    """Seconds spent in each clocked function (and its call count) while the block runs."""
    import importlib

    totals: dict[str, float] = {}
    restore = []
    for module_name, owner_name, attribute, part in _CLOCKS:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        original = getattr(owner, attribute)
        totals[part] = totals[part + " calls"] = 0.0
        setattr(owner, attribute, _clocked(original, totals, part))
        restore.append((owner, attribute, original))
    try:
        yield totals
    finally:
        for owner, attribute, original in restore:
            setattr(owner, attribute, original)


def parts_ms(totals: dict[str, float], wall_s: float, steps: int) -> dict[str, float]:
    """Milliseconds per output step of each part, from :func:`clocks_on`'s totals."""
    inside = {
        "forward": totals["forward"],
        "sampling": totals["sample_tokens"] - totals["apply"],
        "apply": totals["apply"],
        "fill": totals["fill"],
        "scheduler": totals["schedule"] + totals["update"],
    }
    inside["rest of step"] = totals["step"] - sum(inside.values())
    inside["outside steps"] = wall_s - totals["step"]
    parts = {part: 1e3 * seconds / steps for part, seconds in inside.items()}
    parts["total"] = 1e3 * wall_s / steps
    parts["steps"] = totals["step calls"]
    return parts


def table(rows: list[tuple[str, dict[str, float]]]) -> list[str]:
    """A markdown table, one row per (label, :func:`parts_ms` result)."""
    lines = [
        "| backend, batch | steps | " + " | ".join(PARTS) + " | total |",
        "|---|---:|" + "---:|" * (len(PARTS) + 1),
    ]
    for label, parts in rows:
        cells = [f"{parts[part]:.2f}" for part in (*PARTS, "total")]
        lines.append(f"| {label} | {parts['steps']:.0f} | " + " | ".join(cells) + " |")
    return lines
