"""vLLM host adapter: registration, request conversion, backend and frontend checks.

Importing this package has no side effect and no vLLM version check:
``registration.install`` checks the release first (``compat``) and imports
the modules that read vLLM internals only on a supported one.
"""
