"""In-process storage for tests and local development, with the semantics of a real store.

Documents are kept serialized (the same envelope as every backend), so nothing read or
written aliases stored data; versions are counters that never repeat; TTL is honoured.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from .base import ANY, PreparedWrite, Storage, StoreItem
from .envelope import unwrap, wrap
from .errors import ConflictError


@dataclass(slots=True)
class _Entry:
    raw: bytes
    etag: str
    expires_at: float | None

    def alive(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at


class MemoryStorage(Storage):
    """A dict behind a lock; safe for many tasks and threads, isolated per instance."""

    def __init__(self, *, max_document_bytes: int | None = None) -> None:
        if max_document_bytes is not None:
            self.max_document_bytes = max_document_bytes
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(1)

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        now = time.monotonic()
        with self._lock:
            found = [(key, self._live(key, now)) for key in keys]
        result = {}
        for key, entry in found:
            if entry is not None:
                envelope = unwrap(key, entry.raw)
                result[key] = StoreItem(envelope.data, entry.etag)
        return result

    async def _write(self, writes: list[PreparedWrite], ttl: float | None) -> dict[str, str]:
        written: dict[str, str] = {}
        failed: list[str] = []
        with self._lock:
            now = time.monotonic()
            expires_at = now + ttl if ttl is not None else None
            for write in writes:
                current = self._live(write.key, now)
                if not _precondition_holds(write.expected, current):
                    failed.append(write.key)
                    continue
                etag = str(next(self._versions))
                self._entries[write.key] = _Entry(wrap(write.key, write.data), etag, expires_at)
                written[write.key] = etag
        if failed:
            raise ConflictError(failed, written)
        return written

    async def _delete(self, keys: list[str], if_match: dict[str, str]) -> None:
        failed = []
        with self._lock:
            now = time.monotonic()
            for key in keys:
                current = self._live(key, now)
                expected = if_match.get(key, ANY)
                if expected != ANY and (current is None or current.etag != expected):
                    failed.append(key)
                elif current is not None:
                    del self._entries[key]
        if failed:
            raise ConflictError(failed, message="delete precondition failed")

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        now = time.monotonic()
        with self._lock:
            keys = sorted(
                key for key, entry in self._entries.items()
                if key.startswith(prefix) and entry.alive(now)
            )
        for key in keys:
            yield key

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and not entry.alive(now):
            del self._entries[key]
            return None
        return entry


def _precondition_holds(expected: str | None, current: _Entry | None) -> bool:
    if expected == ANY:
        return True
    if expected is None:
        return current is None
    return current is not None and current.etag == expected
