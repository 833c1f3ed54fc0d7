"""The schema collections and the oracle that writes their instances into a grammar.

Shared by the coverage benchmark and the tests that check enforcement on the
same data: the collections' schemas and labelled instances (``cases``), and
each instance written token by token with the real tokenizer, its object keys
in the order the schema suggests (``writer``, ``key_order``); ``upgradable``
picks the schemas whose keys routing would upgrade.
"""
