"""Benchmarks behind ``selfctx bench``: each prints figures (medians, ratios), never asserts."""
