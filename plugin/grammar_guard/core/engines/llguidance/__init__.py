"""The llguidance binding: llguidance is imported only in this package."""
