"""Turn vLLM's structured-output request forms into core :class:`GrammarSpec` keys.

The API process and the engine core both go through :func:`spec_from_params`
/ :func:`spec_from_key`, so the key the frontend validated is the key the
engine compiles.
"""

from __future__ import annotations

from typing import Any

from vllm.config.structured_outputs import StructuredOutputsConfig
from vllm.sampling_params import StructuredOutputsParams
from vllm.v1.structured_output.backend_types import StructuredOutputOptions
from vllm.v1.structured_output.request import get_structured_output_key

from grammar_guard.core.errors import InvalidGrammarError
from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind
from grammar_guard.core.settings import objects_open

_KIND_BY_OPTION = {
    StructuredOutputOptions.JSON: RequestKind.JSON_SCHEMA,
    StructuredOutputOptions.JSON_OBJECT: RequestKind.JSON_OBJECT,
    StructuredOutputOptions.REGEX: RequestKind.REGEX,
    StructuredOutputOptions.CHOICE: RequestKind.CHOICE,
    StructuredOutputOptions.GRAMMAR: RequestKind.GRAMMAR,
    StructuredOutputOptions.STRUCTURAL_TAG: RequestKind.STRUCTURAL_TAG,
}


def compile_options(config: StructuredOutputsConfig) -> CompileOptions:
    return CompileOptions(
        any_whitespace=not config.disable_any_whitespace,
        open_objects=objects_open(config.disable_additional_properties),
    )


def spec_from_key(
    option: StructuredOutputOptions, text: str, options: CompileOptions
) -> GrammarSpec:
    return GrammarSpec.build(_KIND_BY_OPTION[option], text, options)


# The fields of StructuredOutputsParams, in the order vLLM's key function reads them.
_KIND_BY_FIELD = {
    "json": RequestKind.JSON_SCHEMA,
    "json_object": RequestKind.JSON_OBJECT,
    "regex": RequestKind.REGEX,
    "choice": RequestKind.CHOICE,
    "grammar": RequestKind.GRAMMAR,
    "structural_tag": RequestKind.STRUCTURAL_TAG,
}


def requested_kind(params: StructuredOutputsParams) -> RequestKind | None:
    """The kind of constraint ``params`` asks for, even one that cannot be turned into a spec."""
    found = _requested_field(params)
    return None if found is None else _KIND_BY_FIELD[found[0]]


def requested_value(params: StructuredOutputsParams) -> Any:
    """The request's value for that constraint (a schema, a regex, choices...), or None."""
    found = _requested_field(params)
    return None if found is None else found[1]


def _requested_field(params: StructuredOutputsParams) -> tuple[str, Any] | None:
    for name in _KIND_BY_FIELD:
        value = getattr(params, name, None)
        if value not in (None, False):  # json_object=False asks nothing
            return name, value
    return None


def spec_from_params(params: StructuredOutputsParams, options: CompileOptions) -> GrammarSpec:
    if isinstance(params.json, dict | list):
        # Built from the value itself: vLLM's key function would json.dumps it
        # first, which recurses without bound on a hostile nesting depth.
        return GrammarSpec.build(RequestKind.JSON_SCHEMA, params.json, options)
    try:
        option, text = get_structured_output_key(params)
    except (TypeError, ValueError) as exc:
        raise InvalidGrammarError(f"structured_outputs has no usable constraint: {exc}") from exc
    return spec_from_key(option, text, options)
