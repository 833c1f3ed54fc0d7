"""``grammar-guard``: check grammars against a model's tokenizer and manage the cache folder.

Every command compiles through the engine's own path
(:func:`~grammar_guard.core.engine_factory.build_engine`,
:class:`~grammar_guard.core.compile_service.CompileService`, the same
:class:`~grammar_guard.core.spec.GrammarSpec` keys), so its verdict and the
files it writes are the engine's. See docs/cli.md.
"""
