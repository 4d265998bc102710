from adapters.memory import MemoryStore
from application.ports.store import ObjectStore
from contracts.store import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self) -> ObjectStore:
        return MemoryStore()
