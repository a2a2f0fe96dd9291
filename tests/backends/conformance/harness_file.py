"""Conformance harness for FileStorage: a fresh temp directory per test, removed after."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator

from agent_state.backends import FileStorage
from agent_state.backends.testing import Harness


async def file_harness() -> AsyncIterator[Harness]:
    root = tempfile.mkdtemp(prefix="agent-state-file-")
    storage = FileStorage(root)
    others: list[FileStorage] = []

    async def put_raw(key: str, raw: bytes) -> None:
        storage.path_for(key).write_bytes(raw)

    async def get_raw(key: str) -> bytes | None:
        path = storage.path_for(key)
        return path.read_bytes() if path.exists() else None

    async def open_another() -> FileStorage:
        others.append(FileStorage(root))
        return others[-1]

    try:
        yield Harness(storage, put_raw, get_raw, open_another)
    finally:
        for store in [storage, *others]:
            await store.close()
        shutil.rmtree(root, ignore_errors=True)
