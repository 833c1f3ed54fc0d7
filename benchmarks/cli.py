"""What every benchmark's command line shares: its parser, NAME=VALUE settings, its outputs."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any


def parser(doc: str | None, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line, with ``--markdown``: where the tables go."""
    described = argparse.ArgumentParser(prog=prog, description=(doc or "").strip().split("\n")[0])
    described.add_argument("--markdown", type=Path, help="also write the tables here")
    return described


def env_pair(item: str) -> tuple[str, str]:
    name, equals, value = item.partition("=")
    if not name or not equals:
        raise argparse.ArgumentTypeError(f"{item!r} is not NAME=VALUE")
    return name, value


def add_fields(into: argparse.ArgumentParser, defaults: Any, *names: str) -> None:
    """``--NAME`` for each of ``names``, fields of the dataclass instance ``defaults``."""
    for name in names:
        default = getattr(defaults, name)
        into.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def fields_of(arguments: argparse.Namespace, cls: type, *names: str) -> Any:
    """``cls`` with the ``names`` options :func:`add_fields` added, as given."""
    assert all(name in {f.name for f in dataclasses.fields(cls)} for name in names)
    return cls(**{name: getattr(arguments, name) for name in names})


def write(path: Path | None, text: str) -> None:
    """``text`` into ``path`` (its folder made), if there is one."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def write_json(path: Path, data: Any) -> None:
    write(path, json.dumps(data, indent=1))


def publish(text: str, markdown: Path | None) -> None:
    """Print the tables and write them where ``--markdown`` says."""
    print(text)
    write(markdown, text)
