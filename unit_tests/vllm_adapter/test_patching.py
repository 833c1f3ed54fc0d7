"""The patch mechanism on stand-ins for vLLM's classes: each patch applies once, state is kept."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pydantic
import pytest
from pydantic import BaseModel, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from grammar_guard.vllm_adapter.patching import (
    ATTRIBUTE,
    FunctionWrap,
    ValidatorSwap,
    cached_state,
    is_patched,
    plugin_state,
)


def _shouting(original: Callable[..., str]) -> Callable[..., str]:
    def shout(*args: Any) -> str:
        return original(*args).upper()

    return shout


class _Greeter:
    def greet(self, name: str) -> str:
        """Say hello."""
        return f"hello {name}"


def test_a_method_is_wrapped_once_and_keeps_its_name_and_original() -> None:
    owner = type("Greeter", (_Greeter,), {"greet": _Greeter.greet})
    patch = FunctionWrap(owner, "greet", _shouting, ("self", "name"))
    assert not patch.applied()

    patch.apply()
    wrapped = owner.greet
    patch.apply()

    assert owner.greet is wrapped
    assert patch.applied()
    assert owner().greet("you") == "HELLO YOU"
    assert (wrapped.__name__, wrapped.__doc__) == ("greet", "Say hello.")
    assert wrapped.__wrapped__ is _Greeter.greet
    assert not is_patched(_Greeter.greet)


def test_a_module_function_is_wrapped_like_a_method() -> None:
    module = types.ModuleType("runner")
    module.greet = lambda name: f"hello {name}"  # type: ignore[attr-defined]
    FunctionWrap(module, "greet", _shouting, ("name",)).apply()
    FunctionWrap(module, "greet", _shouting, ("name",)).apply()
    assert module.greet("you") == "HELLO YOU"  # type: ignore[attr-defined]


def test_a_wrap_checks_that_its_target_is_there_with_the_parameters_it_was_written_for() -> None:
    assert FunctionWrap(_Greeter, "greet", _shouting, ("self", "name")).check() is None
    assert FunctionWrap(_Greeter, "wave", _shouting, ("self",)).check() == "_Greeter.wave is gone"
    renamed = FunctionWrap(_Greeter, "greet", _shouting, ("self", "person"))
    assert renamed.check() == "_Greeter.greet takes (self, name), not (self, person)"
    # Only the leading parameters count when the wrapper passes the rest through.
    leading = FunctionWrap(_Greeter, "greet", _shouting, ("self",), more_parameters=True)
    assert leading.check() is None
    assert FunctionWrap(_Greeter, "greet", _shouting, ("self",)).check() is not None


def test_a_wrapped_target_is_checked_as_the_original() -> None:
    owner = type("Greeter", (_Greeter,), {"greet": _Greeter.greet})
    patch = FunctionWrap(owner, "greet", _shouting, ("self", "name"))
    patch.apply()
    assert patch.check() is None


def _refusing_empty(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def check(data: Any) -> Any:
        if data == {}:
            raise ValueError("empty")
        return original(data)

    return check


def test_a_before_validator_is_swapped_once_and_the_schema_rebuilt() -> None:
    calls: list[Any] = []

    class Request(BaseModel):
        text: str = ""

        @model_validator(mode="before")
        @classmethod
        def count(cls, data: Any) -> Any:
            calls.append(data)
            return data

    patch = ValidatorSwap(Request, "count", _refusing_empty)
    patch.apply()
    swapped = Request.__pydantic_decorators__.model_validators["count"]
    patch.apply()

    assert Request.__pydantic_decorators__.model_validators["count"] is swapped
    assert patch.applied()
    with pytest.raises(pydantic.ValidationError, match="empty"):
        Request.model_validate({})
    assert Request.model_validate({"text": "a"}).text == "a"
    assert calls == [{"text": "a"}]
    assert patch.check() is None
    assert ValidatorSwap(Request, "counts", _refusing_empty).check() == (
        "test_a_before_validator_is_swapped_once_and_the_schema_rebuilt.<locals>.Request "
        "has no model validator counts"
    )


# Module level: the schema rebuild resolves the annotations by name.
@pydantic_dataclass
class Config:
    name: str = "a"

    @model_validator(mode="after")
    def check(self) -> Config:
        return self


@pydantic_dataclass
class Outer:
    config: Config


def test_an_after_validator_of_a_dataclass_reaches_the_models_that_copied_its_schema() -> None:
    def refusing_b(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def check(self: Any) -> Any:
            if self.name == "b":
                raise ValueError("no b")
            return original(self)

        return check

    ValidatorSwap(Config, "check", refusing_b, dependents=(Outer,)).apply()

    with pytest.raises(pydantic.ValidationError, match="no b"):
        Config(name="b")
    with pytest.raises(pydantic.ValidationError, match="no b"):
        Outer(config={"name": "b"})  # type: ignore[arg-type]


def test_state_is_made_once_per_object_under_one_attribute() -> None:
    first, second = types.SimpleNamespace(), types.SimpleNamespace()
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    assert cached_state(first, "buffer", make) is cached_state(first, "buffer", make)
    assert cached_state(second, "buffer", make) is not cached_state(first, "buffer", make)
    assert cached_state(first, "nothing", lambda: None) is None
    assert cached_state(first, "nothing", make) is None  # None is kept, not made again
    assert len(made) == 2
    assert list(vars(first)) == [ATTRIBUTE]
    assert set(plugin_state(first)) == {"buffer", "nothing"}
