"""The core's imports point down: each part imports only the parts beneath it.

A newcomer reads the layers bottom-up, a grammar library can be added or
dropped in one folder, and the optional upgrade feature can be removed with
``upgrade/`` and the lines in ``service`` that build it. Every import counts,
including those inside functions and under ``TYPE_CHECKING``: a type-only
import upwards is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grammar_guard.core

CORE = Path(grammar_guard.core.__file__).parent
PACKAGE = "grammar_guard.core"

# Bottom first. A module belongs to the longest prefix listed here; parts in
# one tuple are one layer and may not import each other in a cycle.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("schema",),
    ("errors", "metrics", "engine_names"),
    ("settings", "private_folder"),
    ("request",),
    # The schema rewrites read request values (with the request's limits) and
    # raise the client's errors; the analysis beneath them needs neither.
    ("schema.rewrite", "schema.rewrite_walks"),
    ("engines.base", "engines.threads", "engines.refusals", "engines.fingerprint"),
    ("engines.xgrammar", "engines.llguidance"),
    ("engines.routing",),
    ("engines.routed",),
    ("engines.factory",),
    ("masks",),
    ("compile",),
    ("upgrade",),
    ("service",),
)
LAYER_OF_PART = {part: depth for depth, parts in enumerate(LAYERS) for part in parts}


def module_name(path: Path) -> str:
    relative = path.relative_to(CORE).with_suffix("")
    parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
    return ".".join(parts)


def part_of(module: str) -> str:
    """The longest listed prefix of ``module`` (a module inside a core package)."""
    pieces = module.split(".")
    for length in range(len(pieces), 0, -1):
        prefix = ".".join(pieces[:length])
        if prefix in LAYER_OF_PART:
            return prefix
    raise AssertionError(f"core module {module!r} is in no layer: add it to LAYERS")


def core_imports(path: Path) -> set[str]:
    """Every core module ``path`` imports, wherever in the file the import is."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE or node.module.startswith(PACKAGE + "."):
                found.update(imported_from(node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name.removeprefix(PACKAGE + "."))
    return found


def imported_from(package: str, name: str) -> str:
    """The core module ``from package import name`` reaches: ``name`` itself if it is a module."""
    module = f"{package}.{name}".removeprefix(PACKAGE + ".")
    folder = CORE.joinpath(*module.split("."))
    if folder.with_suffix(".py").is_file() or folder.is_dir():
        return module
    return package.removeprefix(PACKAGE).removeprefix(".")


def core_modules() -> dict[str, set[str]]:
    """Each core module and the core modules it imports; packages' ``__init__`` hold no code."""
    return {
        module_name(path): core_imports(path)
        for path in sorted(CORE.rglob("*.py"))
        if path.name != "__init__.py"
    }


def test_every_core_module_is_in_a_layer_and_imports_only_layers_beneath_or_its_own() -> None:
    upward = [
        f"{module} ({part_of(module)}) imports {target} ({part_of(target)})"
        for module, targets in core_modules().items()
        for target in targets
        if LAYER_OF_PART[part_of(target)] > LAYER_OF_PART[part_of(module)]
    ]
    assert upward == []


def test_no_two_parts_of_one_layer_import_each_other() -> None:
    part_imports: dict[str, set[str]] = {}
    for module, targets in core_modules().items():
        part = part_of(module)
        part_imports.setdefault(part, set()).update(
            part_of(target)
            for target in targets
            if part_of(target) != part and LAYER_OF_PART[part_of(target)] == LAYER_OF_PART[part]
        )
    both_ways = sorted(
        (part, other)
        for part, others in part_imports.items()
        for other in others
        if part in part_imports.get(other, set()) and part < other
    )
    assert both_ways == []


def test_no_module_imports_itself_back_through_others() -> None:
    graph = core_modules()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target in graph and target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_checks_see_an_upward_import(tmp_path: Path) -> None:
    """The walk finds imports inside functions and under TYPE_CHECKING, not only at the top."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from grammar_guard.core.service import CompileService\n"
        "def late():\n    import grammar_guard.core.upgrade.upgrades\n"
        "from grammar_guard.core import settings\n"
    )
    assert core_imports(source) == {"service", "upgrade.upgrades", "settings"}
    assert LAYER_OF_PART[part_of("service")] > LAYER_OF_PART[part_of("engines.xgrammar.engine")]


def test_the_routing_policy_needs_only_the_engines_checks() -> None:
    """Routing decides without a tokenizer: it reads checks, never builds or holds an engine."""
    engine_modules = {"engines.xgrammar.engine", "engines.llguidance.engine"}
    assert core_modules()["engines.routing"] & engine_modules == set()
