"""Engine-agnostic core: request specs, input limits, compile cache, bitmasks.

Nothing here imports vLLM (a ruff rule checks it). Each grammar library's types
(xgrammar, llguidance) stay inside its own engine modules, so that another host
or another grammar engine plugs in behind :mod:`grammar_guard.core.engines.base`
without touching the rest.
"""
