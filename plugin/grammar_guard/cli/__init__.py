"""``grammar-guard``: check grammars against a model's tokenizer and manage the cache folder.

Every command compiles through the engine's own path
(:func:`~grammar_guard.core.engines.factory.build_engine`,
:class:`~grammar_guard.core.service.CompileService`, the same
:class:`~grammar_guard.core.request.spec.GrammarSpec` keys), so its verdict and the
files it writes are the engine's. See docs/cli.md.
"""
