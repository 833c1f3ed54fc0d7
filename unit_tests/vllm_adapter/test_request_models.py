"""A ``structured_outputs`` that is not an object is a validation error (400), not a crash."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from vllm.exceptions import VLLMValidationError

import grammar_guard
from grammar_guard.vllm_adapter.registration import install, installed_patches
from grammar_guard.vllm_adapter.request_models import VALIDATOR, request_models

grammar_guard.register()

pytestmark = pytest.mark.seam

BODIES = {
    "CompletionRequest": {"model": "m", "prompt": "Answer: "},
    "ChatCompletionRequest": {"model": "m", "messages": [{"role": "user", "content": "Hi"}]},
}


@pytest.fixture(params=request_models(), ids=lambda model: model.__name__)
def model(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.mark.parametrize(("value", "type_name"), [("json", "str"), ([], "list"), (5, "int")])
def test_a_structured_outputs_that_is_not_an_object_is_refused_naming_it(
    model: Any, value: object, type_name: str
) -> None:
    with pytest.raises(pydantic.ValidationError, match=f"must be an object.*not {type_name}"):
        model.model_validate({**BODIES[model.__name__], "structured_outputs": value})


def test_vllm_s_own_check_still_runs_after_it(model: Any) -> None:
    body = {**BODIES[model.__name__], "structured_outputs": {"json": {}, "regex": "a"}}
    with pytest.raises(VLLMValidationError, match="only use one kind"):
        model.model_validate(body)


def test_an_object_is_accepted(model: Any) -> None:
    body = {**BODIES[model.__name__], "structured_outputs": {"json": {"type": "object"}}}
    assert model.model_validate(body).structured_outputs.json == {"type": "object"}


def test_installing_twice_wraps_once() -> None:
    before = [
        model.__pydantic_decorators__.model_validators[VALIDATOR] for model in request_models()
    ]
    install()
    after = [
        model.__pydantic_decorators__.model_validators[VALIDATOR] for model in request_models()
    ]
    assert after == before
    assert installed_patches()["structured_outputs_type_check"]
