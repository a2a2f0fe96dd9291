"""Local-file storage: one envelope file per key in a flat directory, safe across processes.

File names come from `filenames` (reversible, lower-case, at most 255 bytes). Every write is
a durable atomic replace (`fileio`), so a crash never leaves a torn document, and runs with
its version check in one critical section under the key's `flock` (`filelock`), so
preconditions hold across tasks, instances and OS processes. Etags are uuid4 hex and never
repeat. TTL is kept in the file as `meta.expires_at` (Unix time); expired documents read as
absent, and `list` deletes them along with temp files left by crashed writers.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import aiofiles.os

from . import _fileio as fileio
from ._base import (
    ANY,
    CONFLICT,
    Outcomes,
    PreparedWrite,
    Storage,
    StoreItem,
    WriteGroup,
    expired,
    precondition_holds,
    unavailable,
)
from ._envelope import Head, unwrap, wrap
from ._errors import FormatError, StorageConfigError
from ._filelock import StripedFileLocks
from ._filenames import is_hashed, key_for_name, name_for_key
from ._keys import check_key

T = TypeVar("T")

LOCK_DIR = ".locks"
STALE_TEMP_SECONDS = 3600.0
"""A temp file this old belongs to a writer that died; `list` deletes it."""

# Blocking file I/O runs in aiofiles' executor: one thread hop per operation, not per call.
_read_files = aiofiles.os.wrap(fileio.read_files)
_read_heads = aiofiles.os.wrap(fileio.read_heads)
_remove_stale = aiofiles.os.wrap(fileio.remove_stale)


class FileStorage(Storage):
    """Documents as files under `root`, which is created if missing."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
    ) -> None:
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self.root = Path(root).absolute()
        with unavailable(f"file storage: cannot create the directory {self.root}", (OSError,)):
            (self.root / LOCK_DIR).mkdir(parents=True, exist_ok=True)
        self._locks = StripedFileLocks(self.root / LOCK_DIR)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileStorage:
        """`file://./relative/dir` or `file:///absolute/dir` (percent-escapes are decoded)."""
        scheme, separator, path = url.partition("://")
        if not separator or scheme.lower() != "file" or not path:
            raise StorageConfigError(f"file storage URL must be file://PATH, got {url!r}")
        return cls(unquote(path), **options)

    def path_for(self, key: str) -> Path:
        """The file holding `key`'s document (for tools and tests; never write it directly)."""
        return self._path(check_key(key))

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        what = f"file storage: cannot read {keys[0]!r}" + (" and more" if len(keys) > 1 else "")
        with unavailable(what, (OSError,)):
            raws = await _read_files(self.root, [self._path(key) for key in keys])
        now = time.time()
        found = {}
        for key, raw in zip(keys, raws, strict=True):
            if raw is None:
                continue
            envelope = unwrap(key, raw)
            if envelope.etag is None:
                raise FormatError(key, "has no etag (it was not written by FileStorage)")
            if not expired(envelope.expires_at, now):
                found[key] = StoreItem(envelope.data, envelope.etag, envelope.raw_data)
        return found

    async def _write(
        self, writes: list[PreparedWrite], ttl: float | None, outcomes: Outcomes
    ) -> None:
        expires_at = time.time() + ttl if ttl is not None else None
        for write in writes:
            action = partial(self._write_locked, write, expires_at)
            etag = await self._locked(write.key, f"cannot write {write.key!r}", action)
            outcomes[write.key] = CONFLICT if etag is None else etag

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        for key in keys:
            action = partial(self._delete_locked, key, if_match.get(key, ANY))
            if not await self._locked(key, f"cannot delete {key!r}", action):
                outcomes[key] = CONFLICT

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        keys = []
        with unavailable(f"file storage: cannot list {self.root}", (OSError,)):
            candidates: dict[str, str | None] = {}  # file name -> key (None: read from the file)
            temps = []
            for name in await aiofiles.os.listdir(self.root):
                if name.startswith(fileio.TEMP_PREFIX):
                    temps.append(self.root / name)
                key = key_for_name(name)  # None for the store's own (dot) files and foreign ones
                if key.startswith(prefix) if key is not None else is_hashed(name):
                    candidates[name] = key
            await _remove_stale(temps, STALE_TEMP_SECONDS)
            heads = await _read_heads([self.root / name for name in candidates])
            now = time.time()
            for (name, key), head in zip(candidates.items(), heads, strict=True):
                if head is None:
                    continue  # deleted since listdir
                key = key or _key_of_hashed(name, head)
                if not key.startswith(prefix):
                    continue
                if not expired(head.expires_at, now):
                    keys.append(key)
                else:
                    action = partial(self._remove_expired_locked, key)
                    await self._locked(key, f"cannot delete expired {key!r}", action)
        for key in sorted(keys):
            yield key

    async def _locked(self, key: str, what: str, action: Callable[[], T]) -> T:
        with unavailable(f"file storage: {what}", (OSError,)):
            return await self._locks.run(key, action)

    def _write_locked(self, write: PreparedWrite, expires_at: float | None) -> str | None:
        """Under the key's lock: replace the document if the precondition holds; new etag."""
        path = self._path(write.key)
        if write.expected != ANY and not _holds(write.expected, fileio.read_head(path)):
            return None
        etag = uuid.uuid4().hex
        fileio.replace_durably(path, wrap(write.key, write.data, etag, expires_at=expires_at))
        return etag

    def _delete_locked(self, key: str, expected: str) -> bool:
        """Under the key's lock: delete if `expected` is ANY or the current etag."""
        path = self._path(key)
        if expected != ANY and not _holds(expected, fileio.read_head(path)):
            return False
        fileio.remove_durably(path)
        return True

    def _remove_expired_locked(self, key: str) -> None:
        path = self._path(key)
        head = fileio.read_head(path)
        if head is not None and expired(head.expires_at):
            fileio.remove_durably(path)

    def _path(self, key: str) -> Path:
        return self.root / name_for_key(key)


def _holds(expected: str | None, head: Head | None) -> bool:
    """Whether a precondition holds on a file's head; an expired document counts as absent."""
    if head is None or expired(head.expires_at):
        return precondition_holds(expected, None)
    return precondition_holds(expected, head.etag or "")  # "": present, in an unknown format


def _key_of_hashed(name: str, head: Head) -> str:
    if head.key is None or name_for_key(head.key) != name:
        raise FormatError(name, "is a hashed file name whose file holds no matching key")
    return head.key
