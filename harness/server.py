"""Start vLLM's OpenAI-compatible server on loopback, as an operator would."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from grammar_guard.core.settings import ENV_PREFIX
from grammar_guard.demo.engine import ENGINE_ENV, ENGINE_KWARGS

STARTUP_TIMEOUT_S = 600
# The server flags that select grammar-guard with compact JSON, as the tests run it.
GRAMMAR_GUARD_FLAGS = (
    "--structured-outputs-config.backend",
    "grammar-guard",
    "--structured-outputs-config.disable_any_whitespace",
    "true",
)


@dataclass(frozen=True)
class ApiServer:
    base_url: str
    model: str
    log_path: Path

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def settled_metrics(self) -> dict[str, float]:
        """``metrics()`` once two reads a second apart agree.

        Engine processes publish their numbers a fraction of a second after
        they change, so a read right after a response may lag behind it.
        """
        previous = self.metrics()
        while True:
            time.sleep(1.0)
            current = self.metrics()
            if current == previous:
                return current
            previous = current

    def metrics(self) -> dict[str, float]:
        """grammar-guard's samples on ``/metrics`` by sample name, summed over their labels."""
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        totals: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("grammar_guard_") and "le" not in sample.labels:
                    totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        return totals


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def without_plugin_settings(environment: Mapping[str, str]) -> dict[str, str]:
    """``environment`` without any ``GRAMMAR_GUARD_*`` setting: what a new user's server sees."""
    return {name: value for name, value in environment.items() if not name.startswith(ENV_PREFIX)}


@contextlib.contextmanager
def start_api_server(
    model: str, *extra_args: str, env: dict[str, str] | None = None, plugin_defaults: bool = False
) -> Iterator[ApiServer]:
    """vLLM's server on loopback: this environment, the tiny-model engine settings, then ``env``.

    ``plugin_defaults``: no ``GRAMMAR_GUARD_*`` setting of this environment
    reaches the server, as for a new operator's.
    """
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    inherited = without_plugin_settings(os.environ) if plugin_defaults else os.environ
    env = {**inherited, **ENGINE_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", **(env or {})}
    log = Path(tempfile.mkstemp(prefix="grammar-guard-server-", suffix=".log")[1])
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(ENGINE_KWARGS["max_model_len"]),
        "--max-num-seqs", str(ENGINE_KWARGS["max_num_seqs"]),
        "--gpu-memory-utilization", str(ENGINE_KWARGS["gpu_memory_utilization"]),
        *extra_args,
    ]  # fmt: skip
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _healthy(base):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"vLLM server did not start (exit {process.poll()}):\n"
                    + log.read_text(errors="replace")[-6000:]
                )
            time.sleep(1)
        yield ApiServer(base_url=base, model=model, log_path=log)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def engine_core_process(server: ApiServer) -> psutil.Process:
    """The engine-core process of ``server``, found by its port and vLLM's process title.

    vLLM never restarts a dead engine core (the server exits instead), so a
    test that compares this process before and after a run proves the
    engine survived it.
    """
    port = str(urllib.parse.urlsplit(server.base_url).port)
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if "vllm.entrypoints.openai.api_server" in command and port in command:
            with contextlib.suppress(psutil.Error):
                engines = [
                    child
                    for child in process.children(recursive=True)
                    if "EngineCore" in " ".join(child.cmdline())
                ]
                if len(engines) == 1:
                    return engines[0]
    raise LookupError(f"no engine-core process found for the server on port {port}")
