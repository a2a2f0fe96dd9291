"""Local-file storage: one envelope file per key in a flat directory, safe across processes.

File names come from `filenames` (reversible, lower-case, at most 255 bytes). Every write is
a durable atomic replace (`fileio`), so a crash never leaves a torn document, and runs with
its version check in one critical section under the key's `flock` (`filelock`), so
preconditions hold across tasks, instances and OS processes. Etags are uuid4 hex and never
repeat. TTL is kept in the file as `meta.expires_at` (Unix time); expired documents read as
absent, and `list` deletes them along with temp files left by crashed writers.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import aiofiles.os

from . import _fileio as fileio
from ._base import ANY, PreparedWrite, Storage, StoreItem
from ._envelope import unwrap, wrap
from ._errors import ConflictError, FormatError, StorageConfigError, StorageUnavailableError
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
        self, root: str | os.PathLike[str], *, max_document_bytes: int | None = None
    ) -> None:
        if max_document_bytes is not None:
            self.max_document_bytes = max_document_bytes
        self.root = Path(root).absolute()
        with _os_errors(f"cannot create the storage directory {self.root}"):
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
        with _os_errors(f"cannot read {keys[0]!r}" + (" and more" if len(keys) > 1 else "")):
            raws = await _read_files(self.root, [self._path(key) for key in keys])
        now = time.time()
        found = {}
        for key, raw in zip(keys, raws, strict=True):
            item = _item(key, raw, now) if raw is not None else None
            if item is not None:
                found[key] = item
        return found

    async def _write(self, writes: list[PreparedWrite], ttl: float | None) -> dict[str, str]:
        expires_at = time.time() + ttl if ttl is not None else None
        written: dict[str, str] = {}
        failed: list[str] = []
        for write in writes:
            action = partial(self._write_locked, write, expires_at)
            etag = await self._locked(write.key, f"cannot write {write.key!r}", action)
            if etag is None:
                failed.append(write.key)
            else:
                written[write.key] = etag
        if failed:
            raise ConflictError(failed, written)
        return written

    async def _delete(self, keys: list[str], if_match: dict[str, str]) -> None:
        failed = []
        for key in keys:
            action = partial(self._delete_locked, key, if_match.get(key, ANY))
            if not await self._locked(key, f"cannot delete {key!r}", action):
                failed.append(key)
        if failed:
            raise ConflictError(failed, message="delete precondition failed")

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        keys = []
        with _os_errors(f"cannot list {self.root}"):
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
                if head.alive(now):
                    keys.append(key)
                else:
                    action = partial(self._remove_expired_locked, key)
                    await self._locked(key, f"cannot delete expired {key!r}", action)
        for key in sorted(keys):
            yield key

    async def _locked(self, key: str, what: str, action: Callable[[], T]) -> T:
        with _os_errors(what):
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
        if head is not None and not head.alive(time.time()):
            fileio.remove_durably(path)

    def _path(self, key: str) -> Path:
        return self.root / name_for_key(key)


def _item(key: str, raw: bytes, now: float) -> StoreItem | None:
    """The document in `raw`, or None if it has expired; `FormatError` if it is unreadable."""
    envelope = unwrap(key, raw)
    expires_at = envelope.meta.get("expires_at")
    if envelope.etag is None or not fileio.is_expiry(expires_at):
        raise FormatError(key, "has no etag or a bad expires_at (not written by FileStorage)")
    if expires_at is not None and now >= expires_at:
        return None
    return StoreItem(envelope.data, envelope.etag)


def _holds(expected: str | None, head: fileio.Head | None) -> bool:
    """Whether a create-only (None) or version precondition holds; expired counts as absent."""
    live = head if head is not None and head.alive(time.time()) else None
    if expected is None:
        return live is None
    return live is not None and live.etag == expected


def _key_of_hashed(name: str, head: fileio.Head) -> str:
    if head.key is None or name_for_key(head.key) != name:
        raise FormatError(name, "is a hashed file name whose file holds no matching key")
    return head.key


@contextlib.contextmanager
def _os_errors(what: str) -> Iterator[None]:
    """Map OS errors (permission, disk full, not a directory...) to StorageUnavailableError."""
    try:
        yield
    except OSError as exc:
        raise StorageUnavailableError(f"file storage: {what}: {exc}") from exc
