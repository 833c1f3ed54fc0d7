"""Imported once by the fork server that starts the workers.

A worker killed on a compile timeout must be replaced, often hundreds of
times in a full run. Started from scratch, a worker spends about 10 s of CPU
before its first compile, 8 of them importing vLLM, torch and transformers
and loading the tokenizer. Forked from a server that did that once, it only
builds its five backends. Nothing here starts a thread or holds state a
worker changes.
"""

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
