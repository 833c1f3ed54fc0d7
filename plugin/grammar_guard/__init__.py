"""vllm-grammar-guard: a structured-output backend for vLLM built on xgrammar.

Importing this package has no side effects on vLLM; :func:`register` (the
``vllm.general_plugins`` entry point) is what installs the backend.
"""

from grammar_guard.core.errors import InvalidGrammarError

__version__ = "0.1.0"

BACKEND_NAME = "grammar-guard"


def register() -> None:
    """Make ``grammar-guard`` selectable in this process (idempotent).

    vLLM calls this in every process through the ``vllm.general_plugins`` entry
    point. ``LLM(...)`` validates its ``structured_outputs_config`` before it
    loads plugins, so offline users call this once before building ``LLM``.
    """
    from grammar_guard.vllm_adapter.registration import install

    install()


__all__ = [
    "BACKEND_NAME",
    "InvalidGrammarError",
    "__version__",
    "register",
]
