"""The test model's tokenizer as vLLM loads it, and the parts of a running ``LLM`` tests reach."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def model_tokenizer(model: str | None = None) -> Any:
    """``model``'s tokenizer (default: the tiny model's 129k-token one) by vLLM's ``get_tokenizer``.

    The one an engine of that model gets, end-of-sequence token included
    (the bare ``tokenizer.json`` has none).
    """
    try:
        from vllm.tokenizers import get_tokenizer
    except ImportError:  # releases before vllm.tokenizers
        from vllm.transformers_utils.tokenizer import get_tokenizer

    from grammar_guard.demo.tiny_model import build_tiny_model

    return get_tokenizer(model or str(build_tiny_model()))


def structured_output_manager(llm: Any) -> Any:
    """The ``StructuredOutputManager`` of an ``LLM`` whose engine core runs in this process."""
    return llm.llm_engine.engine_core.engine_core.structured_output_manager


def grammar_guard_service(llm: Any) -> Any | None:
    """grammar-guard's compile service in ``llm``'s engine core; None under another backend."""
    return getattr(structured_output_manager(llm).backend, "service", None)
