"""One ``LLM(...)`` as vLLM starts it by default, engine core spawned: two checks, one start.

Started by the ``spawned_engine`` fixture (``conftest.py``) in a fresh
interpreter with default settings (no ``GRAMMAR_GUARD_*`` variable), since
an engine start is the slow part of these tests:

1. right after start, the first request of every kind while every core is
   busy decoding (one round of ``first_request.py``'s offline form;
   checked by ``test_first_request.py``). It runs first: nothing may have
   been compiled before it;
2. then every demo case on vLLM's multi-process path, where the engine core
   loads the plugin only through the ``vllm.general_plugins`` entry point, and
   the count of the plugin's mask applies read in each worker
   (``test_multiprocess_engine.py``).

Writes both reports as one JSON file.

    python -m integration_tests.spawned_engine_run MODEL OUTPUT DECODE_STREAMS
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any


def apply_steps_in_worker(worker: Any) -> tuple[int, int]:
    """Run inside each worker by ``collective_rpc``: its pid and the plugin's apply count."""
    from grammar_guard.vllm_adapter.apply_hook import applied_steps

    return os.getpid(), applied_steps()


def every_case(llm: Any) -> dict[str, Any]:
    """Every demo case, twice, on ``llm``; with the engine client and the workers' apply counts."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from grammar_guard.demo.cases import CASES

    cases = [case for case in CASES for _ in (1, 2)]
    params = [
        SamplingParams(
            max_tokens=64,
            temperature=1.0,
            seed=seed,
            structured_outputs=StructuredOutputsParams(**case.structured_outputs),
        )
        for case, seed in zip(cases, [1, 2] * len(CASES), strict=True)
    ]
    outputs = llm.generate(["Answer: "] * len(params), params, use_tqdm=False)
    return {
        "engine_client": type(llm.llm_engine.engine_core).__name__,
        "results": [
            {
                "case": case.name,
                "text": out.outputs[0].text,
                "finish_reason": out.outputs[0].finish_reason,
            }
            for case, out in zip(cases, outputs, strict=True)
        ],
        "pid": os.getpid(),
        "workers": llm.collective_rpc(apply_steps_in_worker),
    }


def main(model: str, output: Path, decode_streams: int) -> None:
    from grammar_guard.demo.engine import start_engine
    from integration_tests.first_request import build_reference_engine, measure_offline

    reference = build_reference_engine(model)
    llm = start_engine(model, multiprocess=True, disable_log_stats=False)
    first = measure_offline(llm, reference, rounds=1, load=decode_streams)
    report = {"first_request": asdict(first), "multiprocess": every_case(llm)}
    output.write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
