"""``grammar-guard stats``: what a cache folder holds, without loading a model."""

from __future__ import annotations

import datetime
import json
from collections import Counter as Tally
from pathlib import Path

from grammar_guard.core.compile.disk_store import StoredFile, stored_files
from grammar_guard.core.errors import shorten
from grammar_guard.core.settings import MIB

_GRAMMAR_CHARS = 48


def _key(item: StoredFile) -> dict[str, object]:
    """The key a file says it holds; empty for files that are not readable cache files."""
    if item.header is None:
        return {}
    try:
        key = json.loads(item.header.get("key", ""))
    except (TypeError, ValueError):
        return {}
    return key if isinstance(key, dict) else {}


def stats_json(folder: Path, budget_bytes: int) -> dict[str, object]:
    files = stored_files(folder)
    return {
        "cache_dir": str(folder),
        "budget_bytes": budget_bytes,
        "total_bytes": sum(item.size for item in files),
        "files": [_file_json(item) for item in files],
    }


def _file_json(item: StoredFile) -> dict[str, object]:
    header = item.header or {}
    key = _key(item)
    return {
        "name": item.path.name,
        "readable": item.header is not None,
        "kind": key.get("kind"),
        "grammar_chars": len(str(key.get("text", ""))),
        "options": key.get("options"),
        "stored_bytes": item.size,
        "memory_bytes": header.get("memory_bytes"),
        "codec": header.get("codec"),
        "fingerprint": header.get("fingerprint"),
        "last_used": item.last_used,
    }


def format_stats(folder: Path, budget_bytes: int) -> str:
    files = stored_files(folder)
    total = sum(item.size for item in files)
    lines = [f"{folder}: {len(files)} files, {_size(total)} of {_size(budget_bytes)}"]
    if files:
        lines.append(f"{'last used':<19}  {'on disk':>10}  {'in memory':>10}  {'kind':<14} grammar")
    lines.extend(_file_line(item) for item in files)
    fingerprints = Tally(
        str((item.header or {}).get("fingerprint", "unreadable")) for item in files
    )
    if len(fingerprints) > 1:
        lines.append("tokenizer/library fingerprints (an engine loads only its own):")
        lines.extend(f"  {name}: {count} files" for name, count in fingerprints.most_common())
    return "\n".join(lines)


def _file_line(item: StoredFile) -> str:
    used = datetime.datetime.fromtimestamp(item.last_used).strftime("%Y-%m-%d %H:%M:%S")
    key = _key(item)
    memory = (item.header or {}).get("memory_bytes")
    in_memory = _size(memory) if isinstance(memory, int) else "?"
    kind = str(key.get("kind", "unreadable"))
    grammar = shorten(str(key.get("text", "")), _GRAMMAR_CHARS)
    return f"{used}  {_size(item.size):>10}  {in_memory:>10}  {kind:<14} {grammar}"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < MIB:
        return f"{count / 1024:.1f} KiB"
    return f"{count / MIB:.1f} MiB"
