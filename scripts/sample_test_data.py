"""Build the repository's test data, ``data/``, from the full collections.

    .venv/bin/python scripts/sample_test_data.py --from DIR [--to data]

``DIR`` holds both full collections (on the development machines,
``../shared/data``): ``json-schema-test-suite/`` and ``jsonschemabench/``.
The JSON-Schema-Test-Suite is small and is copied whole (``LICENSE``,
``tests/draft2020-12``, ``remotes``). Of jsonschemabench's 6,325 files a
sample is copied, byte for byte, holding:

1. ``named``: every file the repository names (its tests, benchmarks and docs);
2. ``first``: the first ``FIRST_PER_CATEGORY`` schemas of every category, as
   ``discover(data, Selection(limit=3))`` picks them: the dead-end walk's
   slice, the same in the sample as in the full collection;
3. ``upgradable``: every schema routing would offer an upgrade for
   (``harness.schema_data.upgradable.upgradable_cases``), so the upgrade-language
   test checks the same schemas on the sample as on the full collection;
4. ``random``: seeded random files of each category, until it holds
   ``PER_CATEGORY`` files.

It also writes ``data/sample.json``: each category's size in the full
collection and in the sample, and why each file is in it. Running it again
on the same collections and code gives the same sample. In ``--to`` it
replaces only what it writes (``data/README.md`` stays), and only in a
folder it wrote before (one with ``sample.json``) or a new one.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST_SUITE = "json-schema-test-suite"
TEST_SUITE_PARTS = ("LICENSE", "tests/draft2020-12", "remotes")
JSONSCHEMABENCH = "jsonschemabench"
MANIFEST = "sample.json"
FIRST_PER_CATEGORY = 3
PER_CATEGORY = 10
SEED = 29  # the issue that asked for the sample
# Where the repository names jsonschemabench files it relies on.
NAMING_PLACES = ("unit_tests", "integration_tests", "benchmarks", "harness", "docs", "README.md")
NAMING_SUFFIXES = frozenset({".py", ".md", ".txt", ".json", ".toml", ".sh"})
_WORD = re.compile(r"[A-Za-z0-9_.\-]+")


def named_files(full: set[str], places: Iterable[Path]) -> set[str]:
    """The jsonschemabench files of ``full`` that a text file under ``places`` names."""
    found: set[str] = set()
    for place in places:
        files = [place] if place.is_file() else sorted(place.rglob("*"))
        for path in files:
            if path.suffix not in NAMING_SUFFIXES or not path.is_file():
                continue
            for word in _WORD.findall(path.read_text(encoding="utf-8", errors="replace")):
                for candidate in (word, f"{word}.json"):
                    if candidate in full:
                        found.add(candidate)
    return found


def first_files(source: Path) -> set[str]:
    """The first schemas of every jsonschemabench category, as the dead-end walk picks them."""
    from harness.schema_data.cases import JSONSCHEMABENCH as SUITE
    from harness.schema_data.cases import Selection, discover

    selection = Selection(suites=(SUITE,), limit=FIRST_PER_CATEGORY)
    return {ref.file for ref in discover(source, selection)}


def upgradable_files(source: Path) -> set[str]:
    """The jsonschemabench files with a schema whose compact key routing would upgrade."""
    from harness.schema_data.upgradable import upgradable_cases

    prefix = f"{JSONSCHEMABENCH}/"
    names = (item.name for item in upgradable_cases(source))
    return {name.removeprefix(prefix).split("#", 1)[0] for name in names if name.startswith(prefix)}


def choose(source: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The sampled files with their reasons, and every full category's files."""
    from harness.schema_data.cases import JSONSCHEMABENCH as SUITE
    from harness.schema_data.cases import category_of

    full = sorted(path.name for path in (source / JSONSCHEMABENCH).glob("*.json"))
    by_category: dict[str, list[str]] = defaultdict(list)
    for name in full:
        by_category[category_of(SUITE, name)].append(name)
    reasons: dict[str, list[str]] = defaultdict(list)
    chosen = (
        ("named", named_files(set(full), (REPO / place for place in NAMING_PLACES))),
        ("first", first_files(source)),
        ("upgradable", upgradable_files(source)),
    )
    for reason, names in chosen:
        for name in sorted(names):
            reasons[name].append(reason)
    for category, names in sorted(by_category.items()):
        # One generator per category: a category's picks do not depend on the others.
        rng = random.Random(f"{SEED}:{category}")
        taken = sum(name in reasons for name in names)
        left = [name for name in names if name not in reasons]
        for name in rng.sample(left, min(len(left), max(0, PER_CATEGORY - taken))):
            reasons[name].append("random")
    return dict(sorted(reasons.items())), dict(sorted(by_category.items()))


def write(source: Path, target: Path) -> dict[str, object]:
    written = (target / TEST_SUITE, target / JSONSCHEMABENCH, target / MANIFEST)
    if target == source or (
        any(path.exists() for path in written) and not (target / MANIFEST).is_file()
    ):
        raise SystemExit(f"{target} holds collections this script did not write; not replacing")
    reasons, by_category = choose(source)
    for path in written[:2]:
        shutil.rmtree(path, ignore_errors=True)
    suite = target / TEST_SUITE
    for part in TEST_SUITE_PARTS:
        origin = source / TEST_SUITE / part
        if origin.is_dir():
            shutil.copytree(origin, suite / part, copy_function=shutil.copyfile)
        else:
            suite.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(origin, suite / part)
    bench = target / JSONSCHEMABENCH
    bench.mkdir(parents=True)
    for name in reasons:
        shutil.copyfile(source / JSONSCHEMABENCH / name, bench / name)
    manifest: dict[str, object] = {
        "jsonschemabench": {
            "files": sum(len(names) for names in by_category.values()),
            "sampled": len(reasons),
            "seed": SEED,
            "per_category": PER_CATEGORY,
            "categories": {
                category: {"files": len(names), "sampled": sum(n in reasons for n in names)}
                for category, names in by_category.items()
            },
            "reasons": reasons,
        },
        TEST_SUITE: "whole: " + ", ".join(TEST_SUITE_PARTS),
    }
    text = json.dumps(manifest, indent=1, ensure_ascii=False)
    (target / MANIFEST).write_text(text + "\n", encoding="utf-8")
    return manifest


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/sample_test_data.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--from",
        dest="source",
        type=Path,
        required=True,
        help="the folder holding both full collections (json-schema-test-suite/, jsonschemabench/)",
    )
    parser.add_argument("--to", type=Path, default=REPO / "data", help="default: %(default)s")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(argv)
    source: Path = arguments.source.resolve()
    for folder in (source / TEST_SUITE, source / JSONSCHEMABENCH):
        if not folder.is_dir():
            print(f"no {folder}: --from names the folder holding both collections", file=sys.stderr)
            return 2
    # The selection runs the benchmarks' own code: discover(), upgradable_cases().
    sys.path.insert(0, str(REPO))
    manifest = write(source, arguments.to.resolve())
    bench = manifest["jsonschemabench"]
    assert isinstance(bench, dict)
    print(f"{bench['sampled']} of {bench['files']} jsonschemabench files into {arguments.to}")
    for category, sizes in bench["categories"].items():
        print(f"  {category}: {sizes['sampled']} of {sizes['files']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
