"""In-process storage for tests and local development, with the semantics of a real store.

Documents are kept serialized and `read` decodes a fresh copy, so nothing `read` or `write`
hands over aliases stored data. Versions are counters that never repeat; TTL is honoured;
a write batch is all-or-nothing.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson

from ._base import Storage, WriteGroup, expired
from ._envelope import unwrap, wrap
from ._errors import StorageConfigError
from ._items import CONFLICT, Outcomes, PreparedWrite, StoreItem, precondition_holds


@dataclass(slots=True)
class _Entry:
    """One stored document: its JSON `data` as written, or planted envelope bytes (`raw`)."""

    etag: str
    expires_at: float | None
    data: bytes | None = None
    raw: bytes | None = None


class MemoryStorage(Storage):
    """A dict behind a lock; safe for many tasks and threads, isolated per instance."""

    atomic_batches = True

    def __init__(
        self, *, max_document_bytes: int | None = None, write_group: WriteGroup | None = None
    ) -> None:
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(1)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
    ) -> MemoryStorage:
        """Open `memory://`: a new empty store. It has no location or options to give."""
        scheme, separator, rest = url.partition("://")
        if scheme.lower() != "memory" or not separator or rest:
            raise StorageConfigError(
                f"memory storage takes no location or options: use 'memory://', not {url!r}"
            )
        return cls(max_document_bytes=max_document_bytes, write_group=write_group)

    def get_envelope(self, key: str) -> bytes | None:
        """The envelope bytes stored at `key`, as every backend stores them (for tools, tests)."""
        with self._lock:
            entry = self._live(key, time.time())
        if entry is None:
            return None
        return entry.raw if entry.raw is not None else wrap(key, entry.data or b"{}", entry.etag)

    def put_envelope(self, key: str, raw: bytes) -> None:
        """Store envelope bytes at `key` unchecked, as a foreign writer would (for tests)."""
        with self._lock:
            self._entries[key] = _Entry(f"raw-{next(self._versions)}", None, raw=raw)

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        now = time.time()
        with self._lock:
            found = [(key, entry) for key in keys if (entry := self._live(key, now)) is not None]
        items = {}
        for key, entry in found:
            if entry.data is not None:
                items[key] = StoreItem(orjson.loads(entry.data), entry.etag, entry.data)
            else:
                envelope = unwrap(key, entry.raw or b"")
                items[key] = StoreItem(envelope.data, entry.etag, envelope.raw_data)
        return items

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        with self._lock:
            now = time.time()
            failed = False
            for write in writes:
                current = self._live(write.key, now)
                if not precondition_holds(write.expected, current.etag if current else None):
                    outcomes[write.key] = CONFLICT
                    failed = True
            if failed:
                return
            for write in writes:
                if write.check_only:
                    continue
                etag = str(next(self._versions))
                expires_at = now + write.ttl if write.ttl is not None else None
                self._entries[write.key] = _Entry(etag, expires_at, write.data)
                outcomes[write.key] = etag

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        with self._lock:
            now = time.time()
            for key in keys:
                current = self._live(key, now)
                etag = current.etag if current is not None else None
                if key in if_match and not precondition_holds(if_match[key], etag):
                    outcomes[key] = CONFLICT
                elif current is not None:
                    del self._entries[key]

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        now = time.time()
        with self._lock:
            keys = sorted(
                key
                for key, entry in self._entries.items()
                if key.startswith(prefix) and not expired(entry.expires_at, now)
            )
        for key in keys:
            yield key

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and expired(entry.expires_at, now):
            del self._entries[key]
            return None
        return entry
