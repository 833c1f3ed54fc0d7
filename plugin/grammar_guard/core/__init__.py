"""Engine-agnostic core: request specs, input limits, compile cache, bitmasks.

Nothing here imports vLLM. Grammar-library types (xgrammar today) stay inside
the engine modules so that another host or another grammar engine plugs in
behind :mod:`grammar_guard.core.engine` without touching the rest.
"""
