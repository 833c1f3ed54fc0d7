"""What a request asks for: its spec (the compile input and cache key), the limits
on its text, and why it failed."""
