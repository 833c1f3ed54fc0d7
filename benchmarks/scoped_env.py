"""Environment variables set for a while, then put back as they were."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

# grammar-guard's objects closed, as vLLM's xgrammar closes them: a benchmark
# that times both gives them the same language to enforce (grammar-guard's own
# default is open, docs/routing.md).
CLOSED_OBJECTS = {"GRAMMAR_GUARD_OBJECTS": "closed"}


@contextlib.contextmanager
def scoped_environment(settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` in this process's environment inside the block only.

    For settings read when something starts (a backend's, an engine's): what
    starts next must not inherit them.
    """
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
