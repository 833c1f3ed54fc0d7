"""The xgrammar binding: xgrammar is imported only in this package."""
