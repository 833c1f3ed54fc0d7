"""Per-step work: the bitmask layout, filling rows, applying masks, and the guard
around one request's matcher."""
