"""Schema coverage: which JSON schemas each structured-output path enforces, and how well.

Every schema of the data folders goes through grammar-guard's compile path
(routed, and with each of its engines forced) and through vLLM's built-in
xgrammar and guidance paths; each of its instances is then fed to the
compiled grammar token by token, and the bitmask fills of one are timed.
See docs/coverage.md.

    .venv/bin/python -m benchmarks.coverage --help
"""

from benchmarks.coverage.run import Coverage, CoverageConfig, run_coverage
from harness.schema_data.cases import Selection

__all__ = ["Coverage", "CoverageConfig", "Selection", "run_coverage"]
