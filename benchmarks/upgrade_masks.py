"""Mask cost of upgradable keys on each engine: why an upgrade is decided by a trial.

Routing offers a background upgrade to xgrammar for keys llguidance serves
only because xgrammar compiles them slowly (``routing.upgrade_target``).
This takes those schemas of the collections, compiles each on both
engines as the backend builds them (129k-token tokenizer, one process),
writes the first valid instance into the llguidance grammar to get its
token path, and times a mask fill before each token of that path on both
grammars (``mask_trial.fill_seconds``, best of ``--repeats``), as the
upgrade trial does.

    .venv/bin/python -m benchmarks.upgrade_masks --data DIR [--every 4] [--markdown PATH]

``--data DIR`` is the folder holding both full collections; without it the
run takes the repository's sample in ``data/`` (which holds every upgradable
schema of the full collections, but not what a changed routing would add)
and says so on stderr. ``--every N`` measures every N-th upgradable schema
(1: all 99, about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.coverage.cases import (
    Case,
    Selection,
    data_dir_or_sample,
    discover,
    load_case,
    sample_data_dir,
)
from benchmarks.coverage.checker import load_tokenizer
from benchmarks.coverage.key_order import SchemaNavigator
from benchmarks.coverage.writer import InstanceWriter, Layout

COMPACT_JSON = {"any_whitespace": False}


@dataclass(frozen=True)
class Upgradable:
    name: str
    case: Case
    spec: Any  # GrammarSpec


def upgradable_cases(data_dir: Path | None = None) -> list[Upgradable]:
    """The collection schemas whose compact JSON keys routing would offer an upgrade.

    ``data_dir``: the folder holding both collections; by default the repository's sample.
    """
    from grammar_guard.core.engines.routing import route, upgrade_target
    from grammar_guard.core.engines.xgrammar.cost import slow_for_xgrammar
    from grammar_guard.core.errors import InvalidGrammarError
    from grammar_guard.core.request.spec import CompileOptions, GrammarSpec, RequestKind

    data_dir = data_dir or sample_data_dir()
    found = []
    for ref in discover(data_dir, Selection()):
        case = load_case(data_dir, ref)
        try:
            spec = GrammarSpec.build(
                RequestKind.JSON_SCHEMA, case.schema, CompileOptions(**COMPACT_JSON)
            )
            chosen = route(spec)
        except InvalidGrammarError:
            continue
        if upgrade_target(spec, chosen, slow=slow_for_xgrammar(spec)) is not None:
            found.append(Upgradable(ref.name, case, spec))
    return found


def token_encoder(tokenizer: Any) -> Any:
    def encode(text: str) -> tuple[int, ...]:
        # A key or string that spells a special token is still plain text.
        return tuple(tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True))

    return encode


def write_instance(routed: Any, compiled: Any, case: Case, data: Any, *, valid: bool) -> Any:
    """The coverage writer's ``Written`` for ``data`` in a fresh grammar of ``compiled``."""
    from grammar_guard.core.masks.layout import allocate_bitmask
    from grammar_guard.vllm_adapter.backend import GuardedGrammar

    tokenizer = load_tokenizer()
    matcher = routed.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)
    writer = InstanceWriter(
        GuardedGrammar(matcher, "benchmark"),
        token_encoder(tokenizer),
        int(tokenizer.eos_token_id),
        Layout(whitespace=False),
        SchemaNavigator(case.schema),
        allocate_bitmask(1, routed.vocab_size),
        integer_forms=valid,
    )
    return writer.write(data, case.schema)


def routed_engine() -> Any:
    from grammar_guard.core.engines.factory import build_engine
    from grammar_guard.core.engines.routed import RoutedEngine
    from grammar_guard.core.settings import EngineSelection

    tokenizer = load_tokenizer()
    engine = build_engine(tokenizer, len(tokenizer), selection=EngineSelection.AUTO)
    assert isinstance(engine, RoutedEngine)
    return engine


def measure(every: int, repeats: int, data_dir: Path | None = None) -> list[dict[str, Any]]:
    from grammar_guard.core.engines.base import EngineName
    from grammar_guard.core.upgrade.trial import fill_seconds

    routed = routed_engine()
    rows = []
    for item in upgradable_cases(data_dir)[::every]:
        valid = next((instance for instance in item.case.instances if instance.valid), None)
        if valid is None:
            continue
        compiled = {engine: routed.compile_part(item.spec, engine.value) for engine in EngineName}
        written = write_instance(
            routed, compiled[EngineName.LLGUIDANCE], item.case, valid.data, valid=True
        )
        # The stop token is the request's own: the trial's path leaves it out.
        path = [token for token in written.tokens if token != load_tokenizer().eos_token_id]
        best = {engine: float("inf") for engine in EngineName}
        for _ in range(repeats):
            for engine in EngineName:
                seconds = fill_seconds(routed, compiled[engine], path)
                assert seconds is not None, f"{item.name}: {engine.value} refused the path"
                best[engine] = min(best[engine], seconds)
        per_token = {engine.value: 1e6 * best[engine] / len(path) for engine in EngineName}
        rows.append({"schema": item.name, "tokens": len(path), **per_token})
    return rows


def markdown(rows: list[dict[str, Any]], every: int) -> str:
    ratios = [row["xgrammar"] / row["llguidance"] for row in rows]
    cheaper = sum(ratio < 1 for ratio in ratios)
    lines = [
        f"Every {every}th upgradable schema ({len(rows)}), first valid instance, mask fill "
        "per token, best of the repeats.",
        "",
        "| schema | tokens | xgrammar µs | llguidance µs | xgrammar / llguidance |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row, ratio in zip(rows, ratios, strict=True):
        lines.append(
            f"| {row['schema']} | {row['tokens']} | {row['xgrammar']:.1f} "
            f"| {row['llguidance']:.1f} | {ratio:.2f}x |"
        )
    lines += [
        "",
        f"xgrammar / llguidance: median **{statistics.median(ratios):.2f}x**, "
        f"{min(ratios):.2f}x to {max(ratios):.2f}x; xgrammar cheaper on {cheaper} of "
        f"{len(rows)}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument(
        "--data",
        type=Path,
        metavar="DIR",
        help="the folder holding both full collections; default: the repository's sample "
        "in data/, said so on stderr",
    )
    args = parser.parse_args()
    data_dir = data_dir_or_sample(args.data)
    if not data_dir.is_dir():
        raise SystemExit(f"no data folder at {data_dir} (give one with --data)")
    table = markdown(measure(args.every, args.repeats, data_dir), args.every)
    if args.markdown is not None:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
