"""The head-of-line benchmark's plot: the simple stream's TTFT, alone and beside slow schemas."""

from __future__ import annotations

from pathlib import Path

from benchmarks.head_of_line.samples import BLOCKS, LOADED, SIMPLE, Results, of_kinds, present
from benchmarks.head_of_line.workload import Kind


def plot(results: Results, block_s: float, slow_times: list[float], path: Path) -> bool:
    """Left: the simple stream's TTFT distribution; right: its TTFT over the loaded blocks.

    False, and no file, without matplotlib: it is the ``bench`` extra, which
    the test environment (and so the smoke run in CI) does not install.
    """
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")  # no display on a benchmark machine
    import matplotlib.pyplot as plt

    figure, (cdf, timeline) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = dict(zip(results, ("tab:red", "tab:blue", "tab:green", "tab:orange"), strict=False))
    for backend, blocks in results.items():
        color = colors[backend]
        for block, style in zip(BLOCKS, (":", "-"), strict=True):
            ttfts = sorted(present([s.ttft_s for s in of_kinds(blocks[block], SIMPLE)]))
            shares = [(i + 1) / len(ttfts) for i in range(len(ttfts))]
            cdf.step(ttfts, shares, style, color=color, where="post", label=f"{backend}, {block}")
        for kind, marker in ((Kind.REPEATED.value, "o"), (Kind.NEW_SMALL.value, "x")):
            shown = [s for s in of_kinds(blocks[LOADED], frozenset({kind})) if s.ttft_s is not None]
            timeline.scatter(
                [s.round * block_s + s.at_s for s in shown],
                [s.ttft_s for s in shown],
                s=5 if marker == "o" else 14,
                marker=marker,
                linewidths=0.8,
                color=color,
                label=f"{backend}, {kind}",
            )
    rounds = 1 + max((s.round for blocks in results.values() for s in blocks[LOADED]), default=0)
    for at in (r * block_s + t for r in range(rounds) for t in slow_times):
        timeline.axvline(at, color="grey", linewidth=0.6, alpha=0.6)
    for boundary in range(1, rounds):
        timeline.axvline(boundary * block_s, color="black", linewidth=0.8, linestyle="--")
    cdf.set(xscale="log", xlabel="TTFT of the simple requests (s)", ylabel="share of requests")
    cdf.set_title("TTFT distribution (dotted: alone; solid: with slow schemas)", fontsize=10)
    cdf.legend(fontsize=8)
    timeline.set(yscale="log", xlabel="due time in the loaded blocks, end to end (s)")
    timeline.set(ylabel="TTFT (s)")
    timeline.set_title(
        "with slow schemas (grey: a slow request is due; dashed: next round)", fontsize=10
    )
    shown = [s.ttft_s for b in results.values() for s in of_kinds(b[LOADED], SIMPLE) if s.ttft_s]
    top = max(shown, default=1.0)
    timeline.set_ylim(top=top * 10)  # room for the legend above the highest point
    timeline.legend(fontsize=7, markerscale=2, ncol=2, loc="upper center")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True
