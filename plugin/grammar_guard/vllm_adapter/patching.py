"""How grammar-guard changes vLLM: wrap a function once, swap a pydantic validator once, keep state.

vLLM loads plugins in every process it starts, sometimes more than once in
one, so every patch has to be idempotent: a wrapper carries a mark, and a
patch whose target already carries it changes nothing. ``registration`` keeps
the one list of patches and applies it under its lock; the hooks only say
what their wrappers do.

Everything the plugin hangs on an object it does not own sits in one dict
under one attribute, :data:`ATTRIBUTE`: on a wrapper, the mark that it is
grammar-guard's; on a vLLM object (a structured-output manager, a model
runner), the state a hook keeps for it. One name is one thing to look for
when debugging, and no hook can collide with vLLM's own attributes or another's.

This module reads no vLLM internals: it is the mechanism, not the seams.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from pydantic.dataclasses import rebuild_dataclass

ATTRIBUTE = "__grammar_guard__"
_PATCHED = "patched"

T = TypeVar("T")
# Given the function it replaces, returns the one to put in its place.
WrapperFactory = Callable[[Callable[..., Any]], Callable[..., Any]]


class Patch(Protocol):
    """One change to vLLM: applying it twice changes nothing the second time."""

    def apply(self) -> None: ...

    def applied(self) -> bool: ...

    def check(self) -> str | None:
        """What differs from the target the patch was written for, or None if nothing does.

        Read-only: a release no one has tested is patched only if every check passes.
        """
        ...


def plugin_state(owner: object) -> dict[str, Any]:
    """Everything the plugin keeps on ``owner``, created empty on first use."""
    state: dict[str, Any] = vars(owner).setdefault(ATTRIBUTE, {})
    return state


def cached_state(owner: object, key: str, create: Callable[[], T]) -> T:
    """``owner``'s entry ``key``, made by ``create`` on first use.

    Two threads that miss together may both create it; the last one is kept,
    which is harmless for the state the hooks keep (a buffer, a filler).
    """
    state = plugin_state(owner)
    if key not in state:
        state[key] = create()
    value: T = state[key]
    return value


def is_patched(function: object) -> bool:
    # getattr, not vars: a bound method (a pydantic classmethod validator) reads its function's.
    state = getattr(function, ATTRIBUTE, None)
    return isinstance(state, dict) and bool(state.get(_PATCHED))


def _mark(wrapper: Callable[..., Any]) -> Callable[..., Any]:
    # A new dict: ``functools.wraps`` copied the original's attributes onto the wrapper.
    setattr(wrapper, ATTRIBUTE, {_PATCHED: True})
    return wrapper


@dataclass(frozen=True)
class FunctionWrap:
    """Replace ``owner.name``, a class's method or a module's function, by a wrapper of it.

    The wrapper carries the original's name and docstring and, as
    ``__wrapped__``, the original itself.
    """

    owner: object
    name: str
    make_wrapper: WrapperFactory
    # The original's parameter names, as the wrapper was written for them;
    # with ``more_parameters``, only its first ones (the wrapper passes the
    # rest through).
    parameters: tuple[str, ...]
    more_parameters: bool = False

    def apply(self) -> None:
        original = getattr(self.owner, self.name)
        if is_patched(original):
            return
        wrapper = functools.wraps(original)(self.make_wrapper(original))
        setattr(self.owner, self.name, _mark(wrapper))

    def applied(self) -> bool:
        return is_patched(getattr(self.owner, self.name))

    def check(self) -> str | None:
        target = f"{_name_of(self.owner)}.{self.name}"
        function = getattr(self.owner, self.name, None)
        if not callable(function):
            return f"{target} is gone"
        found = tuple(inspect.signature(inspect.unwrap(function)).parameters)
        expected = self.parameters
        if found == expected or (self.more_parameters and found[: len(expected)] == expected):
            return None
        return f"{target} takes ({', '.join(found)}), not ({', '.join(expected)})"


@dataclass(frozen=True)
class ValidatorSwap:
    """Replace the pydantic model validator ``name`` of ``model`` by a wrapper of its function.

    The wrapper is called as pydantic calls the original (``(data)`` before,
    ``(self)`` after validation). Pydantic validates with a schema built from
    the validators, so ``model`` is rebuilt, then ``dependents``: models that
    copied its schema into their own when they were built.
    """

    model: type
    name: str
    make_validator: WrapperFactory
    dependents: tuple[type, ...] = ()

    def apply(self) -> None:
        validators = self._validators()
        validator = validators[self.name]
        if is_patched(validator.func):
            return
        validators[self.name] = dataclasses.replace(
            validator, func=_mark(self.make_validator(validator.func))
        )
        for model in (self.model, *self.dependents):
            _rebuild(model)

    def applied(self) -> bool:
        return is_patched(self._validators()[self.name].func)

    def check(self) -> str | None:
        if self.name not in self._validators():
            return f"{_name_of(self.model)} has no model validator {self.name}"
        return None

    def _validators(self) -> dict[str, Any]:
        validators: dict[str, Any] = self.model.__pydantic_decorators__.model_validators  # type: ignore[attr-defined]
        return validators


def _name_of(owner: object) -> str:
    return str(getattr(owner, "__qualname__", None) or getattr(owner, "__name__", owner))


def _rebuild(model: type) -> None:
    if issubclass(model, BaseModel):
        model.model_rebuild(force=True)
    else:
        rebuild_dataclass(model, force=True)  # type: ignore[arg-type]
