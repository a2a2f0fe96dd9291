"""export_store / import_store on every backend: a restore into a fresh store equals the
original (values and remaining TTLs), a second run writes nothing, and a cut-short export is
refused before anything is written."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_state import IncompleteExportError, export_store, import_store, open_storage
from agent_state.backends import Storage, StoreItem
from tests.stores import STORES

DOCS = 12


@pytest.fixture(params=list(STORES))
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    make = STORES[request.param]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return make(str(tmp_path / "a")), make(str(tmp_path / "b"))


@pytest.fixture
async def stores(urls: tuple[str, str]) -> AsyncIterator[tuple[Storage, Storage]]:
    async with open_storage(urls[0]) as source, open_storage(urls[1]) as target:
        yield source, target


async def snapshot(storage: Storage) -> dict[str, tuple[dict[str, object], float | None]]:
    """Every document's value and the Unix time it expires at (None: never)."""
    keys = [key async for key in storage.list("")]
    found = await storage.read(keys)
    now = time.time()
    return {key: (item.value, None if item.ttl is None else now + item.ttl)
            for key, item in found.items()}  # fmt: skip


async def test_export_then_import_into_a_fresh_store_equals_the_original(
    stores: tuple[Storage, Storage], tmp_path: Path
) -> None:
    source, target = stores
    for i in range(DOCS):
        ttl = None if i % 3 == 0 else 600.0 + 60 * i
        await source.write({f"b/doc/{i}": StoreItem({"n": i, "text": "é" * i}, ttl=ttl)})
    path = tmp_path / "backup.jsonl"
    with open(path, "wb") as out:
        report = await export_store(source, out)
    assert report.documents == DOCS
    restored = await import_store(target, path)
    assert (restored.written, restored.present, restored.expired) == (DOCS, 0, 0)
    original, copy = await snapshot(source), await snapshot(target)
    assert {key: value for key, (value, _) in copy.items()} == {
        key: value for key, (value, _) in original.items()
    }
    for key, (_, expires_at) in original.items():
        restored_at = copy[key][1]
        if expires_at is None:
            assert restored_at is None, key
        else:
            assert restored_at is not None and abs(restored_at - expires_at) < 1.0, key
    again = await import_store(target, path)  # resumed or repeated: nothing written twice
    assert (again.written, again.present) == (0, DOCS)


async def test_a_cut_short_export_is_refused_before_anything_is_written(
    stores: tuple[Storage, Storage], tmp_path: Path
) -> None:
    source, target = stores
    await source.write({"b/one": StoreItem({"n": 1})})
    await source.write({"b/two": StoreItem({"n": 2})})
    path = tmp_path / "backup.jsonl"
    with open(path, "wb") as out:
        await export_store(source, out)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))  # the end line never written
    with pytest.raises(IncompleteExportError, match="no end line"):
        await import_store(target, path)
    assert [key async for key in target.list("")] == []
