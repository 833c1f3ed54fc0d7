"""The collections: their schemas by category, and each schema's instances.

docs/coverage.md ("The data") describes the three suites' formats and categories. The parent
reads only counts (:func:`discover`); a worker loads what it checks (:func:`load_case`),
numbers keeping their literal text (:class:`NumberLiteral`), a ``"text"`` test as that text
(:class:`RawText`).
"""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSONSCHEMABENCH = "jsonschemabench"
TEST_SUITE = "test-suite"
PROJECT_CASES = "grammar-guard-cases"
# The public collections other projects measure on too: the headline figures
# are theirs, never mixed with the project's own cases.
SHARED_SUITES = (JSONSCHEMABENCH, TEST_SUITE)
SUITES = (*SHARED_SUITES, PROJECT_CASES)
_SUITE_FOLDERS = {
    JSONSCHEMABENCH: Path("jsonschemabench"),
    TEST_SUITE: Path("json-schema-test-suite/tests/draft2020-12"),
    PROJECT_CASES: Path("coverage-cases"),
}
# Suites whose files hold a list of {"description", "schema", "tests"}.
_LIST_SUITES = frozenset({TEST_SUITE, PROJECT_CASES})
_TRAILING_NUMBER = re.compile(r"_\d+$")


# The repository's own data: the whole JSON-Schema-Test-Suite draft 2020-12
# and a sample of jsonschemabench (data/README.md, scripts/sample_test_data.py).
SAMPLE_DATA_DIR = Path(__file__).resolve().parents[2] / "data"
SAMPLE_MANIFEST = "sample.json"


def headline_suites(suites: Iterable[str]) -> tuple[str, ...]:
    """The suites a run's headline figures count: the shared collections among ``suites``.

    All of ``suites`` when none is shared (a run of the project's cases alone).
    """
    present = [suite for suite in SUITES if suite in set(suites)]
    return tuple(suite for suite in present if suite in SHARED_SUITES) or tuple(present)


def sample_data_dir() -> Path:
    """``data/`` at the repository root: what the tests read, and a benchmark given no data."""
    return SAMPLE_DATA_DIR


def data_dir_or_sample(given: Path | None) -> Path:
    """``given`` (the full collections), or the repository's sample, said so on stderr."""
    if given is not None:
        return given
    sampled = sum(1 for _ in suite_folder(SAMPLE_DATA_DIR, JSONSCHEMABENCH).glob("*.json"))
    manifest = json.loads((SAMPLE_DATA_DIR / SAMPLE_MANIFEST).read_text(encoding="utf-8"))
    full = int(manifest[JSONSCHEMABENCH]["files"])
    print(
        f"no --data given: running on the repository's sample in data/ ({sampled:,} "
        f"jsonschemabench schemas of {full:,}, the whole JSON-Schema-Test-Suite draft 2020-12); "
        "the figures in docs/benchmarks.md are from the full collections: --data DIR",
        file=sys.stderr,
        flush=True,
    )
    return SAMPLE_DATA_DIR


def suite_folder(data_dir: Path, suite: str) -> Path:
    # The full collections given with --data do not carry the project's cases.
    root = SAMPLE_DATA_DIR if suite == PROJECT_CASES else data_dir
    return root / _SUITE_FOLDERS[suite]


@dataclass(frozen=True)
class CaseRef:
    """One schema of a data folder and how many instances come with it."""

    suite: str  # one of SUITES
    file: str  # relative to the suite's folder
    index: int  # the schema's position in its file (test-suite files hold several)
    category: str
    description: str
    valid_total: int
    invalid_total: int

    @property
    def name(self) -> str:
        return f"{self.suite}/{self.file}#{self.index}"


@dataclass(frozen=True)
class NumberLiteral:
    """A JSON number exactly as the data file wrote it."""

    text: str


@dataclass(frozen=True)
class RawText:
    """An instance given as text (a test's ``"text"``), fed to the grammar exactly so.

    For output a grammar may let through that is no JSON value at all (an
    empty value: ``{"a":}``), which ``"data"`` cannot express.
    """

    text: str


@dataclass(frozen=True)
class Instance:
    description: str
    valid: bool
    data: Any  # JSON value with NumberLiteral numbers, or RawText


@dataclass(frozen=True)
class Case:
    schema: Any  # plain JSON, as a server would parse a request's schema
    instances: tuple[Instance, ...]


@dataclass(frozen=True)
class Selection:
    # The shared collections: what the other readers of discover() (the
    # dead-end walk, the upgrade-language test) measure. The command line's default is SUITES.
    suites: Sequence[str] = SHARED_SUITES
    categories: Sequence[str] = ()  # fnmatch patterns; empty: every category
    files: Sequence[str] = ()  # file names or suite-relative paths; empty: every file
    limit: int | None = None  # the first N schemas of each category


def category_of(suite: str, relative: str) -> str:
    stem = relative.removesuffix(".json")
    if suite in _LIST_SUITES:
        return stem
    return stem.split("---", 1)[0] if "---" in stem else _TRAILING_NUMBER.sub("", stem)


def discover(data_dir: Path, selection: Selection) -> list[CaseRef]:
    """The selected schemas, in a stable order: suite, file name, index."""
    refs: list[CaseRef] = []
    per_category: dict[tuple[str, str], int] = {}
    for suite in selection.suites:
        for relative in _files(data_dir, suite):
            category = category_of(suite, relative)
            if not _selected(relative, category, selection):
                continue
            for ref in _refs_in(data_dir, suite, relative, category):
                seen = per_category.get((suite, category), 0)
                if selection.limit is not None and seen >= selection.limit:
                    break
                per_category[(suite, category)] = seen + 1
                refs.append(ref)
    return refs


def load_case(data_dir: Path, ref: CaseRef) -> Case:
    text = (suite_folder(data_dir, ref.suite) / ref.file).read_text(encoding="utf-8")
    plain = _groups(ref.suite, json.loads(text))[ref.index]
    literal = json.loads(text, parse_int=NumberLiteral, parse_float=NumberLiteral)
    tests = _groups(ref.suite, literal)[ref.index]["tests"]
    instances = tuple(
        Instance(str(test.get("description", "")), is_valid(test), _instance_data(test))
        for test in tests
    )
    return Case(plain["schema"], instances)


def is_valid(test: dict[str, Any]) -> bool:
    """A test's label; a ``"text"`` test must be invalid (text that is no JSON never is)."""
    valid = bool(test["valid"])
    if valid and "text" in test:
        raise ValueError(f"a test given as text must be invalid: {test.get('description')!r}")
    return valid


def _instance_data(test: dict[str, Any]) -> Any:
    if "text" in test:
        if "data" in test or not isinstance(test["text"], str):
            raise ValueError(f'a test gives a "text" string or "data": {test.get("description")!r}')
        return RawText(test["text"])
    return test["data"]


def _files(data_dir: Path, suite: str) -> Iterator[str]:
    folder = suite_folder(data_dir, suite)
    pattern = "**/*.json" if suite in _LIST_SUITES else "*.json"
    yield from sorted(path.relative_to(folder).as_posix() for path in folder.glob(pattern))


def _selected(relative: str, category: str, selection: Selection) -> bool:
    if selection.files and not any(
        relative == wanted or Path(relative).name == wanted for wanted in selection.files
    ):
        return False
    return not selection.categories or any(
        fnmatch.fnmatchcase(category, pattern) for pattern in selection.categories
    )


def _groups(suite: str, document: Any) -> list[dict[str, Any]]:
    return document if suite in _LIST_SUITES else [document]


def _refs_in(data_dir: Path, suite: str, relative: str, category: str) -> Iterator[CaseRef]:
    document = json.loads((suite_folder(data_dir, suite) / relative).read_text(encoding="utf-8"))
    for index, group in enumerate(_groups(suite, document)):
        tests = group["tests"]
        valid = sum(is_valid(test) for test in tests)
        yield CaseRef(
            suite=suite,
            file=relative,
            index=index,
            category=category,
            description=str(group.get("description", "")),
            valid_total=valid,
            invalid_total=len(tests) - valid,
        )
