"""Conformance harness for MemoryStorage."""

from __future__ import annotations

from collections.abc import AsyncIterator

from agent_state.backends import MemoryStorage
from agent_state.backends.testing import Harness


async def memory_harness() -> AsyncIterator[Harness]:
    storage = MemoryStorage()

    async def put_raw(key: str, raw: bytes) -> None:
        storage.put_envelope(key, raw)

    async def get_raw(key: str) -> bytes | None:
        return storage.get_envelope(key)

    async def open_another() -> MemoryStorage:
        return storage  # one process, one dict: the same instance is the only "other client"

    yield Harness(storage, put_raw, get_raw, open_another)
    await storage.close()
