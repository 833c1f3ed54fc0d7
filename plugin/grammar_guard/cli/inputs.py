"""Grammar files as the cache keys a request for them would have."""

from __future__ import annotations

from pathlib import Path

from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

# What a file holds, by its extension; ``--kind`` overrides it.
KIND_BY_EXTENSION: dict[str, RequestKind] = {
    ".json": RequestKind.JSON_SCHEMA,
    ".regex": RequestKind.REGEX,
    ".re": RequestKind.REGEX,
    ".ebnf": RequestKind.GRAMMAR,
    ".gbnf": RequestKind.GRAMMAR,
    ".lark": RequestKind.GRAMMAR,
}
# Kinds a single file can hold (json_object has no grammar to read).
FILE_KINDS = tuple(kind for kind in RequestKind if kind is not RequestKind.JSON_OBJECT)
WARMUP_EXTENSION = ".jsonl"


class InputError(ValueError):
    """A file the command cannot use; the message names it."""


def kind_of(path: Path, override: RequestKind | None) -> RequestKind:
    if override is not None:
        return override
    kind = KIND_BY_EXTENSION.get(path.suffix.lower())
    if kind is None:
        known = ", ".join(sorted(KIND_BY_EXTENSION))
        raise InputError(f"{path}: cannot tell the kind from {path.suffix!r} ({known}); use --kind")
    return kind


def read_spec(path: Path, kind: RequestKind, options: CompileOptions) -> GrammarSpec:
    """The spec of one grammar file; raises ``InputError`` or ``InvalidGrammarError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from exc
    if kind is RequestKind.REGEX:
        # Editors end files with a newline that is no part of the pattern.
        text = text.removesuffix("\n").removesuffix("\r")
    return GrammarSpec.build(kind, text, options)


def is_warmup_file(path: Path) -> bool:
    return path.suffix.lower() == WARMUP_EXTENSION
