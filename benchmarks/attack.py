"""Hostile requests at once against grammar-guard and vLLM's built-in backends, side by side.

Each backend gets a fresh server with default settings (compact JSON) and the
same attack (``harness.attack``): one request of every hostile class at the
same moment, a benign client repeating a cached ``choice`` request, a
``/health`` probe. The table goes to docs/reliability.md's generated
``attack`` section with ``--write-docs``.

    .venv/bin/python -m benchmarks.attack [--backends grammar-guard,guidance,xgrammar]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmarks import cli, provenance
from benchmarks.docs_sections import write_section
from harness.attack import ANSWER_LIMIT_S, HOSTILE, run_attack
from harness.server import GRAMMAR_GUARD_FLAGS, start_api_server, without_plugin_settings

from grammar_guard.demo.tiny_model import build_tiny_model

BACKENDS = ("grammar-guard", "guidance", "xgrammar")
RELIABILITY = provenance.REPO / "docs" / "reliability.md"
Summary = dict[str, Any]


def attack(backend: str, model: str) -> Summary:
    # grammar-guard's flags, with ``backend`` in its place: compact JSON for every backend.
    backend_flag, _, *compact_json = GRAMMAR_GUARD_FLAGS
    with start_api_server(
        model, backend_flag, backend, *compact_json, plugin_defaults=True
    ) as server:
        return run_attack(server.base_url, server.model).summary()


# The table's first rows; a row for each hostile class follows.
LABELS = (
    f"hostile requests answered (not 5xx) within {ANSWER_LIMIT_S:.0f} s",
    "`/health` worst",
    "benign request worst (alone)",
    "benign requests failed",
    "server up after",
)


def _column(summary: Summary) -> list[str]:
    """One backend's cells, a row each."""
    answers = [summary["hostile"][hostile.name] for hostile in HOSTILE]
    return [
        f"{summary['hostile_acceptable']} of {len(HOSTILE)}",
        f"{summary['health_worst_s']:.2f} s",
        f"{summary['benign_worst_s']:.2f} s ({summary['benign_alone_worst_s']:.2f} s)",
        str(summary["benign_failures"]),
        "yes" if summary["alive_after"] else "**no**",
        *(f"{answer['status'] or 'none'} in {answer['seconds']:.1f} s" for answer in answers),
    ]


def markdown(results: dict[str, Summary]) -> str:
    labels = [*LABELS, *(hostile.name for hostile in HOSTILE)]
    columns = [_column(summary) for summary in results.values()]
    lines = ["| | " + " | ".join(f"`{name}`" for name in results) + " |"]
    lines.append("|---|" + "---:|" * len(results))
    lines += [f"| {' | '.join(row)} |" for row in zip(labels, *columns, strict=True)]
    return "\n".join(lines)


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--json", type=Path, default=Path("build/attack.json"))
    parser.add_argument("--write-docs", action="store_true", help="rewrite reliability.md's table")
    arguments = parser.parse_args()
    for name in set(os.environ) - set(without_plugin_settings(os.environ)):
        del os.environ[name]  # default settings: the servers inherit this environment
    tree = provenance.commit()
    model = str(build_tiny_model())
    results = {backend: attack(backend, model) for backend in arguments.backends.split(",")}
    cli.write_json(arguments.json, results)
    command = "python -m benchmarks.attack --write-docs"
    body = provenance.header(tree, command) + "\n\n" + markdown(results)
    if arguments.write_docs:
        write_section("attack", body, RELIABILITY)
    cli.publish(body, arguments.markdown)


if __name__ == "__main__":
    main()
