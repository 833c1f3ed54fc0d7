"""Compiling off the engine's loop: the cache, the in-thread and worker compilers,
their priority and budgets, the disk store and warm-up."""
