"""Registration through vLLM's own plugin loading, in fresh interpreters."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK_PATCHES = """
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
load_general_plugins.__globals__["plugins_loaded"] = False
load_general_plugins()  # vLLM may load plugins more than once per process
from grammar_guard.vllm_adapter.registration import installed_patches
from vllm.sampling_params import SamplingParams
method = SamplingParams._validate_structured_outputs
print(json.dumps({"patches": installed_patches(),
                  "wrapped_once": not hasattr(method.__wrapped__, "__grammar_guard_patch__")}))
"""

PARSE_CLI = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.engine.arg_utils import AsyncEngineArgs
parser = make_arg_parser(FlexibleArgumentParser())
args = parser.parse_args(["--model", sys.argv[1], *sys.argv[2:]])
config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
so = config.structured_outputs_config
print(json.dumps({"backend": so.backend, "compact": so.disable_any_whitespace}))
"""


REFUSE_OLD_VLLM = """
import vllm
vllm.__version__ = "0.31.4"
import grammar_guard
try:
    grammar_guard.register()
except RuntimeError as exc:
    print(exc)
"""


def _run(code: str, *args: str) -> dict[str, object]:
    run = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_entry_point_installs_every_patch_once_in_a_fresh_process() -> None:
    report = _run(CHECK_PATCHES)
    assert report["patches"] == {
        "config_backend_name": True,
        "config_validator": True,
        "frontend_validation": True,
        "backend_construction": True,
        "request_admission": True,
        "failure_reasons_engine": True,
        "failure_reasons_api": True,
        "structured_outputs_type_check": True,
        "bitmask_fill": True,
        "bitmask_apply": True,
    }
    assert report["wrapped_once"] is True


def test_unsupported_vllm_is_refused_naming_the_supported_range() -> None:
    run = subprocess.run(
        [sys.executable, "-c", REFUSE_OLD_VLLM], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    message = run.stdout.strip().splitlines()[-1]
    assert "vLLM 0.31.4 is installed" in message
    assert ">=0.32.0,<0.33.0" in message


def test_server_flag_in_dotted_form(tiny_model: str) -> None:
    report = _run(
        PARSE_CLI, tiny_model,
        "--structured-outputs-config.backend", "grammar-guard",
        "--structured-outputs-config.disable_any_whitespace", "true",
    )  # fmt: skip
    assert report == {"backend": "grammar-guard", "compact": True}


def test_server_flag_in_json_form(tiny_model: str) -> None:
    flag = '{"backend": "grammar-guard", "disable_any_whitespace": true}'
    report = _run(PARSE_CLI, tiny_model, "--structured-outputs-config", flag)
    assert report == {"backend": "grammar-guard", "compact": True}


def test_other_backends_keep_vllm_rules(tiny_model: str) -> None:
    run = subprocess.run(
        [
            sys.executable, "-c", PARSE_CLI, tiny_model,
            "--structured-outputs-config",
            '{"backend": "outlines", "disable_any_whitespace": true}',
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode != 0
    assert "disable_any_whitespace is only supported" in run.stderr
