"""What the integration tests and the benchmarks both drive a real server with.

The OpenAI-compatible server started as an operator would (``server``),
checks on outputs that do not go through the backend under test
(``oracles``) and the bad-input corpus (``bad_input``). It lives at the
repository root, beside ``integration_tests/`` and ``benchmarks/``, so that
neither imports the other's files, and outside ``plugin/``, so it is never
shipped.
"""
