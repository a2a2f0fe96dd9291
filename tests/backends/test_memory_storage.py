"""MemoryStorage over a long uptime: expired documents are dropped and each document is held
in compact bytes, so the store's memory follows its live data (an injected clock, no sleeps)."""

from __future__ import annotations

import tracemalloc

from agent_state.backends import MemoryStorage, StoreItem

DOCS = 5_000


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def write_round(storage: MemoryStorage, round_: int, ttl: float | None = 1.0) -> None:
    for i in range(DOCS):
        await storage.write({f"r{round_}/doc/{i}": StoreItem({"n": i})}, ttl=ttl)


async def test_expired_documents_are_dropped_by_later_writes() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    await write_round(storage, 0)
    clock.now += 2  # every document of round 0 expired
    await write_round(storage, 1)
    assert [key async for key in storage.list("r0/")] == []
    assert storage.document_count() == DOCS  # round 0 is gone from the store, not only hidden
    clock.now += 0.5  # round 1 still lives
    assert len(await storage.read([f"r1/doc/{i}" for i in range(DOCS)])) == DOCS


async def test_memory_follows_live_data_over_many_expiring_rounds() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        await write_round(storage, 0)
        one_round = tracemalloc.get_traced_memory()[0] - start
        for round_ in range(1, 6):
            clock.now += 2
            await write_round(storage, round_)
        six_rounds = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    print(f"one round of {DOCS}: {one_round} B, after six: {six_rounds} B")
    assert one_round / DOCS < 1_000  # a small document costs its bytes and its entry, not 4 KB
    assert six_rounds < 1.5 * one_round  # one round lives at a time
    assert storage.document_count() == DOCS


async def test_rewritten_and_deleted_keys_leave_no_expiry_bookkeeping_behind() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    await storage.write({"hot": StoreItem({"n": -1})}, ttl=3600)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for i in range(DOCS):  # one key rewritten with a long TTL, others written and deleted
            await storage.write({"hot": StoreItem({"n": i}, "*")}, ttl=3600)
            await storage.write({f"gone/{i % 8}": StoreItem({"n": i})}, ttl=3600)
            await storage.delete([f"gone/{i % 8}"])
        grown = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    print(f"{DOCS} rewrites and deletes: {grown} B")
    assert storage.document_count() == 1
    assert grown < 50_000  # not one expiry entry kept per write (10,000 of them)
