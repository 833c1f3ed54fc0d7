"""Head-of-line blocking: do slow grammar compiles delay everyone else's first token?

A steady stream of simple structured requests, in blocks alone and with slow schemas, on each
backend's engine in turn; docs/head-of-line.md has the method. ``workload`` holds the stream,
``run`` sends it to every engine (and sets its rate), ``report`` turns the samples into figures.
"""
