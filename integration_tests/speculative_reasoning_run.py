"""Speculative decoding and a reasoning parser together; print the results as JSON.

Started by ``test_speculative_reasoning.py`` in a fresh interpreter, because
it needs an engine configured differently from the shared one: ngram drafts
(which the grammar must validate without advancing, then roll back) and the
DeepSeek-R1 reasoning parser (the grammar applies only after ``</think>``).

Decoding is greedy and each scenario is its own ``generate`` call: random
sampling with speculative decoding is not reproducible on vLLM's CPU path,
and which requests share a step depends on when their grammars compile.
"""

from __future__ import annotations

import json
import sys
from typing import Any

REPEATED = "abc abc abc abc abc abc abc abc abc abc"
WRONG_DRAFTS_REGEX = r"(abc ){2}x{6}"
ANSWER_REGEX = r"[0-9]{3}"
THINKING_BUDGET = 6
# "</think>" at the end of a prompt means reasoning is over: constrained from the start.
AFTER_REASONING = f"{REPEATED} {REPEATED}</think>"


def main(model: str) -> None:
    from grammar_guard.demo.engine import start_engine

    llm = start_engine(
        model,
        speculative_config={
            "method": "ngram",
            "num_speculative_tokens": 3,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 4,
        },
        reasoning_parser="deepseek_r1",
        disable_log_stats=False,
    )
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    tokenizer = llm.get_tokenizer()
    think_end = tokenizer.convert_tokens_to_ids("</think>")

    def run(prompt: str, constraint: dict[str, Any], **extra: Any) -> dict[str, Any]:
        params = SamplingParams(
            max_tokens=48,
            temperature=0.0,
            structured_outputs=StructuredOutputsParams(**constraint),
            **extra,
        )
        completion = llm.generate([prompt], [params], use_tqdm=False)[0].outputs[0]
        ids = list(completion.token_ids)
        split = ids.index(think_end) + 1 if think_end in ids else 0
        return {
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "ended_reasoning": think_end in ids,
            "reasoning": tokenizer.decode(ids[: max(split - 1, 0)]),
            "answer": tokenizer.decode(ids[split:], skip_special_tokens=True),
        }

    def spec_metrics() -> dict[str, Any]:
        return {
            metric.name: getattr(metric, "value", None)
            for metric in llm.get_metrics()
            if metric.name.startswith("vllm:spec_decode_num_")
        }

    results = {"drafts_accepted": run(AFTER_REASONING, {"choice": [REPEATED]})}
    metrics_after_accepted = spec_metrics()
    results["drafts_rejected"] = run(AFTER_REASONING, {"regex": WRONG_DRAFTS_REGEX})
    # The budget makes vLLM end the reasoning after a fixed number of free tokens.
    results["reasoning_first"] = run(
        "Think.<think>", {"regex": ANSWER_REGEX}, thinking_token_budget=THINKING_BUDGET
    )
    report = {"results": results, "spec_metrics": metrics_after_accepted}
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
