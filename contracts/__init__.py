"""Abstract behaviour suites, one per port, that every adapter's tests subclass."""
