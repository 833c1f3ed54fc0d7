"""Under CI=true a run fails on a skip the machine does not impose (harness/skip_policy.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[1]

PLANTED = """
import pytest
from harness.skip_policy import UNAVAILABLE_HERE, unavailable_here

def test_runs():
    pass

def test_without_a_gpu():
    unavailable_here("no NVIDIA GPU")

def test_on_a_release_without_the_seam():
    pytest.importorskip("no_such_vllm_module", reason=UNAVAILABLE_HERE + "no such seam")
"""
MISSING_DATA = """
import pytest

def test_on_data():
    pytest.skip("the data folder is absent")
"""
MODULE_SKIP = """
import pytest
pytest.importorskip("no_such_module_anywhere")

def test_never_collected():
    pass
"""


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, **modules: str
) -> pytest.RunResult:
    monkeypatch.setenv("CI", ci)
    # The planted run imports harness from this repository.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(**modules)
    return pytester.runpytest_subprocess("-p", "harness.skip_policy", "-p", "no:cacheprovider")


@pytest.mark.parametrize("ci", ["true", ""])
def test_skips_for_the_machine_or_the_release_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    result = _run(pytester, monkeypatch, ci, test_planted=PLANTED)
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize("module", [MISSING_DATA, MODULE_SKIP], ids=["in a test", "at import"])
def test_any_other_skip_fails_a_ci_run_and_is_named(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    result = _run(pytester, monkeypatch, "true", test_planted=PLANTED, test_other=module)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skipped for a reason other than no GPU*", "*test_other.py*"])


def test_outside_ci_another_skip_is_named_but_does_not_fail(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, monkeypatch, "", test_other=MISSING_DATA)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*CI=true fails on these*", "*the data folder is absent*"])
