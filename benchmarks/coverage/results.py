"""One result per schema and path: plain picklable data, shared by the workers and the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.coverage.masks import LogHistogram
from harness.schema_data.cases import CaseRef

# The plugin as it serves by default: each schema routed to the engine that
# enforces it (GRAMMAR_GUARD_ENGINE=auto). Other code and the docs use the name.
PLUGIN_PATH = "grammar-guard"
# The plugin with GRAMMAR_GUARD_ENGINE forcing one engine for every schema.
PLUGIN_XGRAMMAR_PATH = "grammar-guard-xgrammar"
PLUGIN_LLGUIDANCE_PATH = "grammar-guard-llguidance"
PLUGIN_PATHS = (PLUGIN_PATH, PLUGIN_XGRAMMAR_PATH, PLUGIN_LLGUIDANCE_PATH)
# vLLM's built-in backends of the same engines.
VLLM_XGRAMMAR_PATH = "vllm-xgrammar"
VLLM_GUIDANCE_PATH = "vllm-guidance"
PATHS = (*PLUGIN_PATHS, VLLM_XGRAMMAR_PATH, VLLM_GUIDANCE_PATH)
# The engines a plugin path's grammar can come from (grammar_guard.core.engine_names.EngineName).
ENGINES = ("xgrammar", "llguidance")

COMPILED = "compiled"
# Reason classes a path can end in instead of COMPILED. The plugin's refusals
# are "unenforced:<keyword>" and "invalid"; vLLM's frontend validation gives
# "unsupported", its engine-side compile "compile-error" (paths.py);
# "error:<ExceptionType>" is any other exception.
TIMEOUT = "timeout"
CRASH = "crash"
INVALID = "invalid"
UNSUPPORTED = "unsupported"
UNENFORCED_PREFIX = "unenforced:"


@dataclass(frozen=True)
class WrongResult:
    """An instance the grammar judged differently from the data's label."""

    test_index: int
    test_description: str
    valid: bool  # the label: True means a valid instance was rejected
    text: str  # the text fed to the grammar, cut to the part around where it refused
    refused_at: int | None  # where in ``text`` the grammar refused; None: it accepted


@dataclass
class PathResult:
    path: str
    outcome: str  # COMPILED or a reason class
    detail: str = ""  # the refusal's message
    compile_s: float | None = None  # compile_grammar alone, for compiled schemas
    compile_cpu_s: float | None = None  # the worker's CPU time over that call
    validate_s: float | None = None  # vLLM's frontend validation (vLLM's paths only)
    cpu_s: float | None = None  # the worker's CPU time for this path: compile and instances
    valid_accepted: int = 0
    invalid_rejected: int = 0
    wrong: list[WrongResult] = field(default_factory=list)
    engine: str | None = None  # which of ENGINES served a compiled schema (plugin paths only)
    # Bitmask fills before each token of the first valid instance (masks.py).
    mask_ns: LogHistogram = field(default_factory=LogHistogram)

    @property
    def compiled(self) -> bool:
        return self.outcome == COMPILED


@dataclass
class SchemaResult:
    ref: CaseRef
    paths: dict[str, PathResult] = field(default_factory=dict)
