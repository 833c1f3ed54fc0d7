"""Build the tiny model, start vLLM with grammar-guard, run one request per kind.

Usage: ``python -m grammar_guard.demo [--model PATH]``. Prints each output and
whether an independent validator accepts it; exits non-zero if any fails.
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="model folder (default: build the tiny local model)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    from grammar_guard.demo.tiny_model import ENGINE_KWARGS, apply_engine_env, build_tiny_model

    apply_engine_env()
    # One process is enough for a demo and starts faster on a small machine.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    model = args.model or str(build_tiny_model())

    import grammar_guard

    grammar_guard.register()  # LLM(...) checks the backend name before vLLM loads plugins

    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from grammar_guard.demo.cases import CASES

    llm = LLM(
        model=model,
        distributed_executor_backend="uni",
        structured_outputs_config={"backend": "grammar-guard", "disable_any_whitespace": True},
        **ENGINE_KWARGS,  # type: ignore[arg-type]
    )
    params = [
        SamplingParams(
            max_tokens=args.max_tokens,
            temperature=1.0,
            seed=index,
            structured_outputs=StructuredOutputsParams(**case.structured_outputs),
        )
        for index, case in enumerate(CASES)
    ]
    outputs = llm.generate(["Answer: "] * len(CASES), params, use_tqdm=False)

    failures = 0
    for case, output in zip(CASES, outputs, strict=True):
        text = output.outputs[0].text
        try:
            case.check(text)
            verdict = "valid"
        except Exception as exc:
            failures += 1
            verdict = f"INVALID ({exc})"
        print(f"{case.name:20} {verdict:8} {text}")
    print(f"{len(CASES) - failures} of {len(CASES)} outputs satisfy their constraint")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
