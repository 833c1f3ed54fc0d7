"""Registration through vLLM's own plugin loading (fresh interpreters), and request admission."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from harness.skip_policy import unavailable_here
from vllm.exceptions import VLLMValidationError
from vllm.v1.structured_output import StructuredOutputManager

import grammar_guard
from grammar_guard import BACKEND_NAME
from grammar_guard.vllm_adapter.backend import GrammarGuardBackend
from grammar_guard.vllm_adapter.compat import installed_release

pytestmark = pytest.mark.seam

CHECK_PATCHES = """
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
load_general_plugins.__globals__["plugins_loaded"] = False
load_general_plugins()  # vLLM may load plugins more than once per process
from grammar_guard.vllm_adapter.patching import is_patched
from grammar_guard.vllm_adapter.registration import installed_patches
from vllm.sampling_params import SamplingParams
method = SamplingParams._validate_structured_outputs
print(json.dumps({"patches": installed_patches(),
                  "wrapped_once": not is_patched(method.__wrapped__)}))
"""

PARSE_CLI = """
import json, sys
from vllm.entrypoints.cli.serve import make_arg_parser  # where `vllm serve` finds it, 0.32 and 0.33
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.engine.arg_utils import AsyncEngineArgs
from grammar_guard.vllm_adapter.compat import installed_release
if not installed_release().v1_model_runner:
    # vLLM 0.34's CPU platform refuses an x86 machine without triton-cpu, which
    # the seam environment (a CUDA wheel, no engine) lacks; the config is the seam.
    import vllm.triton_utils
    vllm.triton_utils.HAS_TRITON = True
parser = make_arg_parser(FlexibleArgumentParser())
args = parser.parse_args(["--model", sys.argv[1], *sys.argv[2:]])
config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
so = config.structured_outputs_config
print(json.dumps({"backend": so.backend, "compact": so.disable_any_whitespace}))
"""


# vLLM's own loader, twice, on a vLLM the plugin does not support: vLLM must
# keep starting, and the backend name must stay unknown to it.
UNSUPPORTED_VLLM = """
import json, typing
import vllm
vllm.__version__ = "0.31.4"
from vllm.plugins import load_general_plugins
load_general_plugins()
load_general_plugins.__globals__["plugins_loaded"] = False
load_general_plugins()
from vllm.config.structured_outputs import StructuredOutputsConfig
names = typing.get_args(StructuredOutputsConfig.__dataclass_fields__["backend"].type)
print(json.dumps({"registered": "grammar-guard" in names}))
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
        "validation_off_loop": True,
        "backend_construction": True,
        "request_admission": True,
        "failure_reasons_engine": True,
        "failure_reasons_api": True,
        "structured_outputs_type_check": True,
        "bitmask_fill": True,
        # None where the release has no V1 runner: its V2 runners apply masks with vLLM's code.
        "bitmask_apply": True if installed_release().v1_model_runner else None,
    }
    assert report["wrapped_once"] is True


def test_an_unsupported_vllm_starts_without_the_backend_and_one_log_line_says_why() -> None:
    run = subprocess.run(
        [sys.executable, "-c", UNSUPPORTED_VLLM], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"registered": False}
    lines = [line for line in run.stderr.splitlines() if "grammar-guard" in line]
    assert len(lines) == 1, run.stderr[-4000:]
    assert "vLLM 0.31.4 is installed" in lines[0]
    assert ">=0.32.0,<0.35.0" in lines[0]
    assert "not registered" in lines[0]
    assert "Traceback" not in run.stderr


# A release newer than every tested one, as vLLM's own loader meets it: with
# every patched seam as the plugin knows it, or with one planted change.
NEWER_VLLM = """
import json, sys, typing
import vllm
vllm.__version__ = "0.35.0"
if sys.argv[1] == "changed":
    from vllm.v1.structured_output import StructuredOutputManager
    def grammar_bitmask(self, requests, structured_output_request_ids, drafts, step): ...
    StructuredOutputManager.grammar_bitmask = grammar_bitmask
from vllm.plugins import load_general_plugins
load_general_plugins()
load_general_plugins.__globals__["plugins_loaded"] = False
load_general_plugins()
from vllm.config.structured_outputs import StructuredOutputsConfig
names = typing.get_args(StructuredOutputsConfig.__dataclass_fields__["backend"].type)
print(json.dumps({"registered": "grammar-guard" in names}))
"""


@pytest.mark.parametrize("seams", ["unchanged", "changed"])
def test_a_newer_vllm_registers_only_if_every_patched_seam_is_unchanged(seams: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", NEWER_VLLM, seams], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    registered = seams == "unchanged"
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"registered": registered}
    lines = [line for line in run.stderr.splitlines() if "vllm-grammar-guard" in line]
    assert len(lines) == 1, run.stderr[-4000:]
    assert "vLLM 0.35 is newer than the newest release" in lines[0]
    if registered:
        assert "registered, untested on this release" in lines[0]
    else:
        assert (
            "bitmask_fill: StructuredOutputManager.grammar_bitmask takes (self, requests, "
            "structured_output_request_ids, drafts, step), not (self, requests, "
            "structured_output_request_ids, scheduled_spec_decode_tokens)"
        ) in lines[0]
        assert "not registered" in lines[0]
    assert "Traceback" not in run.stderr


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


# Request admission through the patched StructuredOutputManager.grammar_init, in this process.


@pytest.fixture
def admitted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A backend with none of its state: what it admits is recorded, nothing compiles."""
    grammar_guard.register()
    requests: list[str] = []
    monkeypatch.setattr(GrammarGuardBackend, "__post_init__", lambda self: None)
    monkeypatch.setattr(
        GrammarGuardBackend,
        "admit_request",
        lambda self, request, *, block: requests.append(request.request_id),
    )
    yield requests


def _manager() -> Any:
    manager = object.__new__(StructuredOutputManager)
    manager.backend = None
    manager.backend_name = None  # vLLM 0.33's __init__ sets it; 0.32 never reads it
    manager.tokenizer = None
    manager.vllm_config = SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: 64))
    manager._use_async_grammar_compilation = True
    return manager


def _request(request_id: str, backend: str) -> Any:
    structured_outputs = SimpleNamespace(_backend=backend)
    return SimpleNamespace(
        request_id=request_id,
        structured_output_request=SimpleNamespace(grammar=None),
        sampling_params=SimpleNamespace(structured_outputs=structured_outputs),
    )


def test_grammar_guard_requests_go_to_the_plugin_whatever_the_engine_backend_name(
    admitted: list[str],
) -> None:
    manager = _manager()
    StructuredOutputManager.grammar_init(manager, _request("first", BACKEND_NAME))
    # vLLM 0.33 refuses a request whose backend is not the engine's; the
    # plugin's requests never reach that check, even under another name.
    manager.backend_name = "xgrammar"
    StructuredOutputManager.grammar_init(manager, _request("second", BACKEND_NAME))

    assert admitted == ["first", "second"]
    assert isinstance(manager.backend, GrammarGuardBackend)


def test_the_plugin_names_its_backend_where_vllm_refuses_other_backends(
    admitted: list[str],
) -> None:
    manager = _manager()
    StructuredOutputManager.grammar_init(manager, _request("ours", BACKEND_NAME))
    if not installed_release().names_engine_backend:
        assert manager.backend_name is None
        unavailable_here(
            f"vLLM {installed_release().name} has one backend per engine without a check"
        )

    assert manager.backend_name == BACKEND_NAME
    with pytest.raises(VLLMValidationError, match="only supports one backend per engine"):
        StructuredOutputManager.grammar_init(manager, _request("theirs", "xgrammar"))
    assert admitted == ["ours"]
