"""What the integration tests and the benchmarks both drive a real server with.

The OpenAI-compatible server started as an operator would (``server``),
checks on outputs that do not go through the backend under test
(``oracles``), the bad-input corpus (``bad_input``), and the schema
collections with the oracle writing their instances (``schema_data``). It lives at the
repository root, beside ``integration_tests/`` and ``benchmarks/``, so that
neither imports the other's files, and outside ``plugin/``, so it is never
shipped.
"""
