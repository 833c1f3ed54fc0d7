"""vLLM host adapter: registration, request conversion, backend and frontend checks.

Importing this package checks the installed vLLM version first, so an
unsupported vLLM fails here with a message naming the supported range
instead of failing later inside a patched function.
"""

from grammar_guard.vllm_adapter.compat import check_vllm_version

check_vllm_version()
