"""Head-of-line blocking: do slow grammar compiles delay everyone else's first token?

A steady Poisson stream of simple structured requests (mostly a few repeated
small schemas, some new small ones) runs in blocks, alone and with a request
every few seconds whose schema is new and slow to compile (strings with a
large ``maxLength``). The figure of merit is the simple requests' time to
first token (TTFT), p50 and p99, and how much the slow schemas move it.

Every configuration runs in one run, one engine after the other, on
the tiny model (``grammar_guard.demo``) with compact JSON: vLLM's built-in
``xgrammar`` and ``guidance`` backends, ``grammar-guard`` routing each schema
to its engine (the default), and ``grammar-guard-xgrammar``, grammar-guard
with xgrammar forced (``GRAMMAR_GUARD_ENGINE=xgrammar``). Each engine is an
``AsyncLLM`` with its engine core in a process of its own: what vLLM's OpenAI
server drives, minus HTTP. Requests
stream (``DELTA`` outputs); a request's TTFT runs from the moment it was due
to the first output carrying a token, and vLLM's per-request timestamps split
it into the wait until the request was first scheduled (its grammar
included), the step that produced the token, and the rest (the API process
and the hops between processes).

Each engine runs ``rounds`` rounds of two blocks, alone and with slow
schemas, in alternating order, so a machine whose load drifts weighs on both
alike. A block ends once all its requests have finished, slow ones included,
so no compile spills into the next block.

Unless ``--rate`` is given, the simple stream's rate is set once, on the
first engine, from how fast it serves bursts of cache hits: half that, and
at most 8 requests/s. A fixed rate that one machine serves easily is a
queue that grows without any slow request on a slower one, and such a run
measures queueing, not blocking.

    .venv/bin/python -m benchmarks.head_of_line [--quick] [--env NAME=VALUE ...]
        [--backends NAME ...] [--block S] [--json PATH] [--markdown PATH]

Prints markdown tables and writes every sample to a JSON file.

``workload`` holds the stream, ``stream`` sends it to one engine,
``calibration`` sets its rate, ``run`` drives every engine in turn,
``samples`` and ``report`` turn what came back into figures and
tables, and ``__main__`` is the command line.
"""
