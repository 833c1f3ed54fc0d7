"""Build the tiny model, start vLLM with grammar-guard, run one request per kind.

Usage: ``python -m grammar_guard.demo [--model PATH]``. Prints each output and
whether an independent validator accepts it; exits non-zero if any fails.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="model folder (default: build the tiny local model)")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()

    from grammar_guard.demo.cases import CASES
    from grammar_guard.demo.engine import start_engine

    llm = start_engine(args.model)
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

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
