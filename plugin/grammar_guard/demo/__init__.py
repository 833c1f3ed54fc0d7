"""A runnable demonstration on a tiny local model (``python -m grammar_guard.demo``)."""
