"""Malformed, hostile and pathological structured-output requests, with what a client must see.

Each :class:`Case` is one HTTP request to vLLM's OpenAI-compatible server
(run with the ``grammar-guard`` backend, compact JSON, the ``hermes`` tool
parser and a 2 s compile timeout) and the class of answer expected:

- ``REFUSED``: a 4xx whose message names the reason;
- ``TIMED_OUT``: a 408 whose message says the compile timed out and when a
  retry may be served (the compile goes on in the background);
- ``CONSTRAINED``: the input is valid, the output satisfies it;

Request bodies are built lazily (``Case.body``), so the megabyte cases cost
nothing until they are sent. Bodies are encoded with ``ensure_ascii`` so a
lone surrogate or a control character travels as a JSON escape, the way a
client would send it.

``case`` holds what a case is and how its reply is judged, ``builders`` how
cases are written; ``constraints``, ``hostile`` and ``fields`` hold the
cases by theme, and ``corpus`` all of them as ``CORPUS``.
"""
