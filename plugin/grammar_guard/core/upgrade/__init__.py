"""The optional upgrade feature: a reused key recompiled on the faster-masking
engine and kept if its masks cost less. Only ``service`` imports it."""
