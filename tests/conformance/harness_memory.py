"""Conformance harness for MemoryStorage."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

from agent_state.backends._memory import MemoryStorage, _Entry
from tests.conformance.harness import Harness

_raw_versions = itertools.count(1)


async def memory_harness() -> AsyncIterator[Harness]:
    storage = MemoryStorage()

    async def put_raw(key: str, raw: bytes) -> None:
        storage._entries[key] = _Entry(raw, f"raw-{next(_raw_versions)}", None)

    async def get_raw(key: str) -> bytes | None:
        entry = storage._entries.get(key)
        return entry.raw if entry else None

    async def open_another() -> MemoryStorage:
        return storage  # one process, one dict: the same instance is the only "other client"

    yield Harness(storage, put_raw, get_raw, open_another)
    await storage.close()
