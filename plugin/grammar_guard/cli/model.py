"""A model's grammar engine, built the way vLLM builds it for the engine core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grammar_guard.core.engines.base import GrammarEngine
    from grammar_guard.core.settings import UnenforcedPolicy


class ModelLoadError(RuntimeError):
    """The model's tokenizer or config could not be loaded; the message says why."""


@dataclass(frozen=True)
class ModelArgs:
    """The subset of vLLM's model flags that decides the tokenizer."""

    model: str
    tokenizer: str | None = None
    tokenizer_mode: str = "auto"
    revision: str | None = None
    trust_remote_code: bool = False


def load_engine(args: ModelArgs, *, unenforced: UnenforcedPolicy) -> GrammarEngine:
    """The engine vLLM's structured-output manager would build for ``args.model``.

    vLLM loads the tokenizer from the model config and sizes the vocabulary
    by the model config (which can exceed the tokenizer's, padding included);
    both matter, since the bitmask and every compiled grammar depend on them.
    """
    # vLLM is imported here, not at module level: ``stats`` never needs it.
    from vllm.config import ModelConfig
    from vllm.tokenizers import cached_tokenizer_from_config
    from vllm.utils.mistral import is_mistral_tokenizer

    from grammar_guard.core.engines.factory import build_engine
    from grammar_guard.core.settings import engine_selection_from_env

    try:
        config = ModelConfig(
            model=args.model,
            tokenizer=args.tokenizer,  # type: ignore[arg-type]  # None: the model's own
            tokenizer_mode=args.tokenizer_mode,
            revision=args.revision,
            trust_remote_code=args.trust_remote_code,
        )
        tokenizer = cached_tokenizer_from_config(config)
    except Exception as exc:  # vLLM and Hugging Face raise many kinds for a bad model
        raise ModelLoadError(f"cannot load the tokenizer of {args.model}: {exc}") from exc
    # The server's own engine selection: its fingerprint must be the server's.
    return build_engine(
        tokenizer,
        config.get_vocab_size(),
        mistral=is_mistral_tokenizer(tokenizer),
        unenforced=unenforced,
        selection=engine_selection_from_env(),
    )
