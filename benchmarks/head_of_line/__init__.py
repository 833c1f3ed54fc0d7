"""Head-of-line blocking: do slow grammar compiles delay everyone else's first token?

A steady stream of simple structured requests, in blocks alone and with slow schemas, on each
backend's engine in turn; docs/head-of-line.md has the method. ``workload`` holds the stream,
``stream`` sends it to one engine and records each request, ``run`` drives every engine (and
sets the stream's rate), ``report`` turns the samples into figures, ``__main__`` is the
command line.
"""
