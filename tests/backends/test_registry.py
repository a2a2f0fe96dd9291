"""`open_storage` picks a backend by URL and refuses what it does not know."""

from __future__ import annotations

import pytest

from agent_state import open_storage
from agent_state.backends import MemoryStorage, StorageConfigError, StoreItem


async def test_memory_urls_give_isolated_stores():
    first, second = open_storage("memory://"), open_storage("memory://")
    assert isinstance(first, MemoryStorage)
    await first.write({"k/a": StoreItem({"v": 1})})
    assert await second.read(["k/a"]) == {}


@pytest.mark.parametrize("url", ["nosuch://x", "memory", "", "://x", 42])
def test_unknown_or_malformed_urls_are_refused(url):
    with pytest.raises(StorageConfigError):
        open_storage(url)
