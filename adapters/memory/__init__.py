"""The in-memory store: the embedded default, and the store for experiments and tests."""

from selfctx.adapters.memory.store import MemoryStore

__all__ = ["MemoryStore"]
