"""Schema coverage: which JSON schemas each structured-output path enforces, and how well.

Every schema of the data folders goes through grammar-guard's compile path and
through vLLM's built-in xgrammar path; each of its instances is then fed to
the compiled grammar token by token. See docs/coverage.md.

    .venv/bin/python -m benchmarks.coverage --help
"""

from benchmarks.coverage.cases import Selection
from benchmarks.coverage.run import Coverage, CoverageConfig, run_coverage

__all__ = ["Coverage", "CoverageConfig", "Selection", "run_coverage"]
