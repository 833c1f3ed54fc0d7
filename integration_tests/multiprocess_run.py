"""Run every case on vLLM's multi-process engine; print the results as JSON.

Started by ``test_multiprocess_engine.py`` in a fresh interpreter: the engine
core is a spawned process that loads the plugin only through vLLM's
``vllm.general_plugins`` entry point, which is what this run proves.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def apply_steps_in_worker(worker: Any) -> tuple[int, int]:
    """Run inside each worker by ``collective_rpc``: its pid and the plugin's apply count."""
    from grammar_guard.vllm_adapter.apply_hook import applied_steps

    return os.getpid(), applied_steps()


def main(model: str) -> None:
    from grammar_guard.demo.cases import CASES
    from grammar_guard.demo.engine import start_engine

    llm = start_engine(model, multiprocess=True)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    params = [
        SamplingParams(
            max_tokens=64,
            temperature=1.0,
            seed=seed,
            structured_outputs=StructuredOutputsParams(**case.structured_outputs),
        )
        for case in CASES
        for seed in (1, 2)
    ]
    outputs = llm.generate(["Answer: "] * len(params), params, use_tqdm=False)
    results = [
        {
            "case": case.name,
            "text": out.outputs[0].text,
            "finish_reason": out.outputs[0].finish_reason,
        }
        for case, out in zip([c for c in CASES for _ in (1, 2)], outputs, strict=True)
    ]
    report = {
        "engine_client": type(llm.llm_engine.engine_core).__name__,
        "results": results,
        "pid": os.getpid(),
        "workers": llm.collective_rpc(apply_steps_in_worker),
    }
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
