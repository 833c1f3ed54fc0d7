"""Refuse a ``structured_outputs`` that is not an object, before vLLM's own check trips on it.

The completion and chat request models of vLLM 0.32 to 0.34 count the constraints of
``structured_outputs`` in a before-validator that calls ``.get`` on it, so a
request with ``"structured_outputs": "json"`` (or a list, or a number) raises
``AttributeError``, which pydantic does not turn into a validation error: the
server answers 500 and drops the connection, whatever the backend. The wrapper
raises ``ValueError`` first, which pydantic and vLLM turn into a 400 naming
the field, and otherwise runs vLLM's check unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from vllm.sampling_params import StructuredOutputsParams

# The request models whose before-validator reads ``structured_outputs``.
REQUEST_MODELS = (
    ("vllm.entrypoints.openai.completion.protocol", "CompletionRequest"),
    ("vllm.entrypoints.openai.chat_completion.protocol", "ChatCompletionRequest"),
)
VALIDATOR = "check_structured_outputs_count"


def request_models() -> list[Any]:
    return [getattr(importlib.import_module(module), name) for module, name in REQUEST_MODELS]


def type_checked(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check_structured_outputs_count(data: Any) -> Any:
        if isinstance(data, dict):
            value = data.get("structured_outputs")
            if value is not None and not isinstance(value, dict | StructuredOutputsParams):
                raise ValueError(
                    "structured_outputs must be an object such as "
                    f'{{"json": {{...}}}}, not {type(value).__name__}'
                )
        return original(data)

    return check_structured_outputs_count
