"""Install grammar-guard into this process's vLLM, or say in one log line why not.

vLLM's plugin loader does not catch what a plugin raises, so a plugin that
refuses the installed vLLM with an exception stops vLLM from starting, for
every backend. On a release outside :data:`~grammar_guard.vllm_adapter.compat.SUPPORTED_RANGE`
the backend stays unregistered instead: vLLM starts, and only a request for
``grammar-guard`` fails (vLLM's own "unknown backend" error). The patches
themselves live in :mod:`~grammar_guard.vllm_adapter.patches`, which imports
vLLM internals and is only imported once the release is known to be supported.
"""

from __future__ import annotations

import functools
import logging

from grammar_guard.vllm_adapter.compat import UnsupportedVLLMVersion, installed_release

logger = logging.getLogger(__name__)


def install() -> None:
    if not _supported():
        return
    from grammar_guard.vllm_adapter.patches import install_patches

    install_patches()


@functools.cache  # vLLM loads plugins several times per process: one line is enough
def _supported() -> bool:
    try:
        installed_release()
    except UnsupportedVLLMVersion as exc:
        logger.error("%s The grammar-guard backend is not registered.", exc)
        return False
    return True
