"""The fingerprint recipe: what a serialised grammar is bound to, one recipe for every engine.

Persistent caches and worker processes are keyed by it, so two engines that
wrote it differently could load each other's grammars.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grammar_guard.core.settings import UnenforcedPolicy


def engine_fingerprint(
    library: str, vocabulary: str, unenforced: UnenforcedPolicy, *rules: str
) -> str:
    """What a grammar ``library`` serialised is bound to; engines load each other's if equal.

    It names the whole vocabulary, not its size (two tokenizers of one size
    can differ in every token); the library release, which stands in for a
    serialisation format no library exposes on its own; the unenforced
    policy, so that a grammar compiled while unenforced keywords were let
    through is never served from disk to an engine that refuses them; and
    ``rules``, the engine's own rewrites of its input by name, so that a
    grammar compiled before a rewrite existed is not loaded by an engine
    that applies it.
    """
    digest = hashlib.sha256(vocabulary.encode())
    digest.update(importlib.metadata.version(library).encode())
    digest.update(unenforced.value.encode())
    for rule in rules:
        digest.update(rule.encode())
    return f"{library}-{digest.hexdigest()[:32]}"
