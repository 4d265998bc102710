"""Host filesystem adapters: identity, reading, and (issue 4) tracking."""
