"""`open_storage` picks a backend by URL and refuses what it does not know."""

from __future__ import annotations

import pytest

from agent_state import open_storage
from agent_state.backends import MemoryStorage, StorageConfigError, StoreItem


async def test_memory_urls_give_isolated_stores() -> None:
    first, second = open_storage("memory://"), open_storage("memory://")
    assert isinstance(first, MemoryStorage)
    await first.write({"k/a": StoreItem({"v": 1})})
    assert await second.read(["k/a"]) == {}


@pytest.mark.parametrize("url", ["nosuch://x", "memory", "", "://x", 42])
def test_unknown_or_malformed_urls_are_refused(url: int | str) -> None:
    with pytest.raises(StorageConfigError):
        open_storage(url)  # type: ignore[arg-type]  # the wrong type is the point


@pytest.mark.parametrize(
    "url", ["memory://x", "memory://?namespace=a", "memory:///tmp/state", "memory://#x"]
)
def test_memory_takes_no_location_or_options(url: str) -> None:
    with pytest.raises(StorageConfigError, match="use 'memory://'"):
        open_storage(url)
    with pytest.raises(StorageConfigError):
        MemoryStorage.from_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost/0?namspace=bot",
        "rediss://localhost/0?ssl_cert_reqd=none",
        "azure-blob://container?max_concurency=4",
        "cosmos://db/container?endpont=https://x",
    ],
)
def test_an_unknown_url_option_is_refused_by_name(url: str) -> None:
    with pytest.raises(StorageConfigError) as info:
        open_storage(url)
    assert url.partition("?")[2].partition("=")[0] in str(info.value)
    assert "known" in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "redis://localhost/0",
        "file://./state",
        "azure-blob://container",
        "cosmos://db/container",
    ],
)
def test_an_unknown_keyword_option_is_refused_before_anything_is_made(url: str) -> None:
    with pytest.raises(StorageConfigError, match="unknown option.*nonsense") as info:
        open_storage(url, nonsense=1)
    assert "known: " in str(info.value) and "max_document_bytes" in str(info.value)


def test_known_keyword_options_reach_the_backend() -> None:
    storage = open_storage("memory://", max_document_bytes=100)
    assert isinstance(storage, MemoryStorage) and storage.max_document_bytes == 100
