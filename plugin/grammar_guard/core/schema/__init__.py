"""Which JSON-Schema constraints a grammar engine would silently not enforce.

The analysis (``analysis``) reads what the engine enforces from data
(``capabilities``) and reports :class:`~grammar_guard.core.schema.findings.Finding`\\ s;
the other modules hold what it builds on. Import from the module that holds a name.
"""
