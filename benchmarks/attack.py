"""Hostile requests at once against grammar-guard and vLLM's built-in backends, side by side.

Each backend gets a fresh server with default settings (compact JSON) and the
same attack (``harness.attack``): one request of every hostile class at the
same moment, a benign client repeating a cached ``choice`` request, a
``/health`` probe. The table goes to docs/reliability.md's generated
``attack`` section with ``--write-docs``.

    .venv/bin/python -m benchmarks.attack [--backends grammar-guard,guidance,xgrammar]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import provenance
from benchmarks.docs_sections import write_section
from harness.attack import ANSWER_LIMIT_S, HOSTILE, AttackReport, run_attack
from harness.server import start_api_server, without_plugin_settings

from grammar_guard.demo.tiny_model import build_tiny_model

BACKENDS = ("grammar-guard", "guidance", "xgrammar")
RELIABILITY = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"
DEFAULT_JSON = Path("build/attack.json")


def attack(backend: str, model: str) -> AttackReport:
    flags = (
        "--structured-outputs-config.backend",
        backend,
        "--structured-outputs-config.disable_any_whitespace",
        "true",
    )
    with start_api_server(model, *flags, plugin_defaults=True) as server:
        return run_attack(server.base_url, server.model)


Summary = dict[str, Any]


def _row(label: str, results: dict[str, Summary], cell: Callable[[Summary], str]) -> str:
    return f"| {label} | " + " | ".join(cell(summary) for summary in results.values()) + " |"


def _answer(hostile: str) -> Callable[[Summary], str]:
    def cell(summary: Summary) -> str:
        answer = summary["hostile"][hostile]
        status = answer["status"] if answer["status"] is not None else "none"
        return f"{status} in {answer['seconds']:.1f} s"

    return cell


def markdown(results: dict[str, Summary]) -> str:
    lines = [
        "| | " + " | ".join(f"`{name}`" for name in results) + " |",
        "|---|" + "---:|" * len(results),
        _row(
            f"hostile requests answered (not 5xx) within {ANSWER_LIMIT_S:.0f} s",
            results,
            lambda summary: f"{summary['hostile_acceptable']} of {len(HOSTILE)}",
        ),
        _row("`/health` worst", results, lambda summary: f"{summary['health_worst_s']:.2f} s"),
        _row(
            "benign request worst (alone)",
            results,
            lambda summary: (
                f"{summary['benign_worst_s']:.2f} s ({summary['benign_alone_worst_s']:.2f} s)"
            ),
        ),
        _row("benign requests failed", results, lambda summary: str(summary["benign_failures"])),
        _row(
            "server up after",
            results,
            lambda summary: "yes" if summary["alive_after"] else "**no**",
        ),
    ]
    lines += [_row(hostile.name, results, _answer(hostile.name)) for hostile in HOSTILE]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--write-docs", action="store_true", help="rewrite reliability.md's table")
    arguments = parser.parse_args()
    for name in set(os.environ) - set(without_plugin_settings(os.environ)):
        del os.environ[name]  # default settings: the servers inherit this environment
    tree = provenance.commit()
    model = str(build_tiny_model())
    results = {
        backend: attack(backend, model).summary() for backend in arguments.backends.split(",")
    }
    arguments.json.parent.mkdir(parents=True, exist_ok=True)
    arguments.json.write_text(json.dumps(results, indent=2))
    table = markdown(results)
    command = "python -m benchmarks.attack --write-docs"
    body = provenance.header(tree, command) + "\n\n" + table
    if arguments.write_docs:
        write_section("attack", body, RELIABILITY)
    print(body)


if __name__ == "__main__":
    main()
