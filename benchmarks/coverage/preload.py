"""Imported once by the fork server that starts the workers: the imports and the tokenizer
(about 10 s of CPU) are paid once, not by each of the hundreds of replacement workers."""

import os

# The tokenizer is forked after loading; it must not have started its thread pool.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# vLLM's guidance backend loads llguidance lazily, at its first use in a worker.
import llguidance.hf
import llguidance.torch  # noqa: F401
import vllm.config
import vllm.sampling_params
import vllm.v1.structured_output.backend_guidance
import vllm.v1.structured_output.backend_xgrammar  # noqa: F401
from harness.model import model_tokenizer

import grammar_guard.vllm_adapter.backend  # noqa: F401

model_tokenizer()
