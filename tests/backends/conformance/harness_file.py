"""Conformance harness for FileStorage: a fresh temp directory per test, removed after."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator

from agent_state import write_group
from agent_state.backends import FileStorage, WriteGroup, whole_key
from agent_state.backends.testing import Harness


async def file_harness() -> AsyncIterator[Harness]:
    """All documents in the root folder (no write group rule)."""
    async for harness in _harness(whole_key):
        yield harness


async def grouped_file_harness() -> AsyncIterator[Harness]:
    """Laid out by the key scheme's write groups, as `open_storage` opens it."""
    async for harness in _harness(write_group):
        yield harness


async def _harness(rule: WriteGroup) -> AsyncIterator[Harness]:
    root = tempfile.mkdtemp(prefix="agent-state-file-")
    storage = FileStorage(root, write_group=rule)
    others: list[FileStorage] = []

    async def put_raw(key: str, raw: bytes) -> None:
        path = storage.path_for(key)
        path.parent.mkdir(exist_ok=True)  # a group's folder, made by its first write
        path.write_bytes(raw)

    async def get_raw(key: str) -> bytes | None:
        path = storage.path_for(key)
        return path.read_bytes() if path.exists() else None

    async def open_another() -> FileStorage:
        others.append(FileStorage(root, write_group=rule))
        return others[-1]

    try:
        yield Harness(storage, put_raw, get_raw, open_another)
    finally:
        for store in [storage, *others]:
            await store.close()
        shutil.rmtree(root, ignore_errors=True)
