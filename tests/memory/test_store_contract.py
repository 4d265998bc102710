from selfctx.adapters.memory import MemoryStore
from selfctx.application.ports.store import ObjectStore
from selfctx.contracts.store import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self) -> ObjectStore:
        return MemoryStore()
