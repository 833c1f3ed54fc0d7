"""``coverage.png``: compile-time distribution per path, and coverage per category.

jsonschemabench categories get a bar each; the test suite's many small files
are shown as two groups (core keywords, ``optional/``). Needs matplotlib
(the ``bench`` extra); without it the plot is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.coverage.cases import TEST_SUITE
from benchmarks.coverage.results import PATHS, SchemaResult
from benchmarks.coverage.tally import Tally

PLOT_FILE = "coverage.png"


def write_plot(results: Sequence[SchemaResult], out_dir: Path) -> Path | None:
    """The plot's path, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    groups = _groups(results)
    figure, (times, valid, invalid) = plt.subplots(
        1, 3, figsize=(18, max(5.0, 0.35 * len(groups) + 1.5)), layout="constrained"
    )
    _plot_times(times, results)
    _plot_shares(
        valid, groups, "valid instances accepted (%)", _valid_share, lambda t: t.valid_total
    )
    _plot_shares(
        invalid,
        groups,
        "invalid instances rejected (%)",
        _invalid_share,
        lambda t: t.invalid_total,
    )
    path = out_dir / PLOT_FILE
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _group_of(result: SchemaResult) -> str:
    ref = result.ref
    if ref.suite != TEST_SUITE:
        return ref.category
    return "test-suite optional/" if ref.category.startswith("optional/") else "test-suite core"


def _groups(results: Sequence[SchemaResult]) -> dict[str, list[SchemaResult]]:
    groups: dict[str, list[SchemaResult]] = {}
    for result in results:
        groups.setdefault(_group_of(result), []).append(result)
    return dict(sorted(groups.items(), reverse=True))  # barh draws bottom-up


def _plot_times(axes: Any, results: Sequence[SchemaResult]) -> None:
    for path in PATHS:
        times = sorted(1000 * t for t in Tally.of(results, path).compile_s)
        if times:
            shares = [100 * (i + 1) / len(times) for i in range(len(times))]
            axes.step(times, shares, where="post", label=f"{path} ({len(times)} compiled)")
    axes.set_xscale("log")
    axes.set_xlabel("compile time (ms, log scale)")
    axes.set_ylabel("schemas compiled within (%)")
    axes.set_title("Compile time, schemas that compiled")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()


def _valid_share(tally: Tally) -> float:
    return 100 * tally.valid_accepted / tally.valid_total if tally.valid_total else 0.0


def _invalid_share(tally: Tally) -> float:
    return 100 * tally.invalid_rejected / tally.invalid_total if tally.invalid_total else 0.0


def _plot_shares(
    axes: Any,
    groups: dict[str, list[SchemaResult]],
    title: str,
    share: Callable[[Tally], float],
    count: Callable[[Tally], int],
) -> None:
    """One bar per path and group; each group's label says of how many instances."""
    height = 0.8 / len(PATHS)
    for offset, path in enumerate(PATHS):
        values = [share(Tally.of(members, path)) for members in groups.values()]
        positions = [i + (offset - (len(PATHS) - 1) / 2) * height for i in range(len(groups))]
        axes.barh(positions, values, height=height, label=path)
    # Instance counts are the same on every path.
    counts = [count(Tally.of(members, PATHS[0])) for members in groups.values()]
    labels = [f"{name} ({n or 'none'})" for name, n in zip(groups, counts, strict=True)]
    axes.set_yticks(range(len(groups)), labels)
    axes.set_xlim(0, 100)
    axes.set_title(title)
    axes.grid(True, axis="x", alpha=0.3)
    axes.legend(loc="lower right")
