"""The framework's own path into `Storage` (`BuiltKeys`, `BuiltWrites`): it skips the checks of
keys, etags and bytes the framework made itself, and nothing else; what outside callers pass
through the public API is checked as before."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import agent_state.backends as backends
from agent_state.backends import (
    ANY,
    ConflictError,
    InvalidKeyError,
    InvalidValueError,
    MemoryStorage,
    StateTooLargeError,
    StoreItem,
)
from agent_state.backends._commit import INTENT
from agent_state.backends._items import BuiltKeys, BuiltWrites

BAD_KEYS = ["", "a//b", "./a", "a/..", "a\x00b", "\ud800"]


def built(
    changes: dict[str, StoreItem], unchanged: dict[str, str | None] | None = None
) -> BuiltWrites:
    batch = BuiltWrites(unchanged)
    batch.update(changes)
    return batch


class SubclassedKeys(BuiltKeys):
    """A subclass of the framework's keys: not the framework's own, so checked."""


class SubclassedWrites(BuiltWrites):
    """A subclass of the framework's batch: not the framework's own, so checked."""


def test_the_framework_path_is_not_public() -> None:
    assert not {"BuiltKeys", "BuiltWrites"} & set(backends.__all__)
    assert not hasattr(backends, "BuiltKeys") and not hasattr(backends, "BuiltWrites")


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_a_bad_key_from_an_outside_caller_is_still_refused(key: str) -> None:
    storage = MemoryStorage()
    item = StoreItem({"a": 1}, None, orjson.dumps({"a": 1}))
    for keys in ([key], (key,), iter([key]), SubclassedKeys((key,))):
        with pytest.raises(InvalidKeyError):
            await storage.read(keys)
    for changes in ({key: item}, SubclassedWrites.fromkeys([key], item)):
        with pytest.raises(InvalidKeyError):
            await storage.write(changes)
    with pytest.raises(InvalidKeyError):
        await storage.write({"ok": item}, unchanged={key: None})
    assert storage.document_count() == 0


async def test_outside_bytes_and_etags_are_still_checked() -> None:
    storage = MemoryStorage()
    with pytest.raises(InvalidValueError):  # bytes that are not a JSON object
        await storage.write({"k": StoreItem({"a": 1}, None, b"[1]")})
    with pytest.raises(InvalidValueError):  # an empty etag
        await storage.write({"k": StoreItem({"a": 1}, "")})
    with pytest.raises(InvalidKeyError):  # a framework batch given other read checks
        await storage.write(built({"a//b": StoreItem({"a": 1})}), unchanged={"x": None})
    assert storage.document_count() == 0


async def test_a_framework_batch_is_written_and_read_like_any_other() -> None:
    storage = MemoryStorage()
    first = {"count": 1}
    etags = await storage.write(built({"a/b": StoreItem(first, None, orjson.dumps(first))}))
    found = await storage.read(BuiltKeys(("a/b", "a/c")))
    assert found["a/b"].value == first and found["a/b"].etag == etags["a/b"]
    second = {"count": 2}
    batch = built({"a/c": StoreItem(second, None, orjson.dumps(second))}, {"a/b": etags["a/b"]})
    await storage.write(batch, unchanged=batch.unchanged)
    assert (await storage.read(["a/c"]))["a/c"].value == second
    stale = built({"a/c": StoreItem({"count": 3}, etags["a/b"])}, {"a/b": None})
    with pytest.raises(ConflictError) as caught:  # a failed read check is still a conflict
        await storage.write(stale, unchanged=stale.unchanged)
    assert sorted(caught.value.keys) == ["a/b", "a/c"]


async def test_the_storage_guards_still_hold_on_the_framework_path() -> None:
    storage = MemoryStorage(max_document_bytes=64)
    big = {"x": "y" * 100}
    with pytest.raises(StateTooLargeError):
        await storage.write(built({"k": StoreItem(big, None, orjson.dumps(big))}))
    reserved: dict[str, Any] = {INTENT: {}}
    with pytest.raises(InvalidValueError):
        await storage.write(built({"k": StoreItem(reserved, ANY, orjson.dumps(reserved))}))
    with pytest.raises(InvalidValueError):  # a TTL this backend cannot keep
        await storage.write(built({"k": StoreItem({}, ANY, b"{}", ttl=-1.0)}))
    assert storage.document_count() == 0
