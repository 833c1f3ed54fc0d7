"""Speculative decoding and a reasoning parser together; print the results as JSON.

Started by ``test_speculative_reasoning.py`` in a fresh interpreter, because
it needs an engine configured differently from the shared one: ngram drafts
(which the grammar must validate without advancing, then roll back) and the
DeepSeek-R1 reasoning parser (the grammar applies only after ``</think>``).
"""

from __future__ import annotations

import json
import sys

REPEATED = "abc abc abc abc abc abc abc abc abc abc"
WRONG_DRAFTS_REGEX = r"(abc ){2}x{6}"
# Unbounded, so the answer runs to max_tokens: the alphabet below has no
# end-of-sequence token to finish a bounded answer with.
ANSWER_REGEX = r"[0-9]+"


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
    # Reasoning is free text from a small alphabet that includes the end of
    # reasoning; after it, the grammar allows digits only.
    reasoning_alphabet = sorted(
        {think_end, *(tokenizer.convert_tokens_to_ids(c) for c in "0123456789klmnopqrstuvwxyz")}
    )

    def params(seed: int, allowed: list[int] | None = None, **constraint: object) -> SamplingParams:
        return SamplingParams(
            max_tokens=48,
            temperature=1.0,
            seed=seed,
            allowed_token_ids=allowed,
            structured_outputs=StructuredOutputsParams(**constraint),  # type: ignore[arg-type]
        )

    # "</think>" at the end of a prompt means reasoning is over: constrained from the start.
    after_reasoning = f"{REPEATED} {REPEATED}</think>"
    requests = {
        "drafts_accepted": (after_reasoning, params(1, choice=[REPEATED])),
        "drafts_rejected": (after_reasoning, params(2, regex=WRONG_DRAFTS_REGEX)),
        "reasoning_first": ("Think.<think>", params(3, reasoning_alphabet, regex=ANSWER_REGEX)),
    }
    outputs = llm.generate(
        [prompt for prompt, _ in requests.values()],
        [sampling for _, sampling in requests.values()],
        use_tqdm=False,
    )
    results = {}
    for name, output in zip(requests, outputs, strict=True):
        completion = output.outputs[0]
        ids = list(completion.token_ids)
        split = ids.index(think_end) + 1 if think_end in ids else 0
        results[name] = {
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "ended_reasoning": think_end in ids,
            "reasoning": tokenizer.decode(ids[: max(split - 1, 0)]),
            "answer": tokenizer.decode(ids[split:], skip_special_tokens=True),
        }
    metrics = {
        metric.name: getattr(metric, "value", None)
        for metric in llm.get_metrics()
        if metric.name.startswith("vllm:spec_decode_num_")
    }
    print("RESULT " + json.dumps({"results": results, "spec_metrics": metrics}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
