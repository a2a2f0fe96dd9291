"""Shared fixtures: a real MemoryStorage that also counts the calls made to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from agent_state.backends import MemoryStorage, StoreItem


class CountingStorage(MemoryStorage):
    """MemoryStorage recording the keys of every read and write batch."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[str]] = []
        self.writes: list[list[str]] = []

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        keys = list(keys)
        self.reads.append(keys)
        return await super().read(keys)

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        self.writes.append(sorted(changes))
        return await super().write(changes, ttl=ttl, unchanged=unchanged)

    async def stored(self, key: str) -> dict[str, Any] | None:
        """The stored document of `key` (None when absent), without counting the read."""
        item = (await MemoryStorage.read(self, [key])).get(key)
        return item.value if item is not None else None


@pytest.fixture
def storage() -> CountingStorage:
    return CountingStorage()
