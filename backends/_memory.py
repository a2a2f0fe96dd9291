"""In-process storage for tests and local development, with the semantics of a real store.

Documents are kept serialized and `read` decodes a fresh copy, so nothing `read` or `write`
hands over aliases stored data. Versions are counters that never repeat; TTL is honoured;
a write batch is all-or-nothing.

Memory follows the live data over any uptime: each document is held in bytes of its own
size (a copy, not the serializer's larger buffer), and expired documents are dropped, not
only hidden: a heap orders the expiry times, and each write pops the expired ones at its
top, a bounded number per written key. The heap holds one entry per write with a TTL;
the entries of documents rewritten or deleted since are skipped when popped, and the heap
is rebuilt from the live documents when it outgrows them (twice their number), which
takes as many steps as writes went by since the last rebuild.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import orjson

from ._base import Storage, WriteGroup, expired
from ._envelope import unwrap, wrap
from ._errors import StorageConfigError
from ._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, precondition_holds

SWEEP_PER_WRITE = 4
"""Expired documents a write may drop beyond one per key it writes (so drops keep up)."""
HEAP_SLACK = 64
"""Heap entries allowed beyond twice the stored documents before the heap is rebuilt."""


LIST_PAGE = 1000
"""Keys a listing takes from the store at a time."""


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
        self,
        *,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: the Unix time TTLs are measured on (a test moves its own)."""
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self._entries: dict[str, _Entry] = {}
        self._expiries: list[tuple[float, str, str]] = []
        """A heap of (expires_at, etag, key), one per write with a TTL (some outdated)."""
        self._lock = threading.Lock()
        self._versions = itertools.count(1)
        self._clock = clock
        self._groups: dict[str, set[str]] | None = {} if self._prefix_group is not None else None
        """The keys of each write group but the group's own, where the write group rule can
        name the group of a prefix (`write_group.prefix_group`): a listing of such a prefix
        looks at that group's keys alone."""

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

    def document_count(self) -> int:
        """How many documents the store holds, expired ones not dropped yet included."""
        return len(self._entries)

    def get_envelope(self, key: str) -> bytes | None:
        """The envelope bytes stored at `key`, as every backend stores them (for tools, tests)."""
        with self._lock:
            entry = self._live(key, self._clock())
        if entry is None:
            return None
        return entry.raw if entry.raw is not None else wrap(key, entry.data or b"{}", entry.etag)

    def put_envelope(self, key: str, raw: bytes) -> None:
        """Store envelope bytes at `key` unchecked, as a foreign writer would (for tests)."""
        with self._lock:
            self._entries[key] = _Entry(f"raw-{next(self._versions)}", None, raw=raw)
            if self._groups is not None:
                self._grouped(self._groups, key)

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        now, entries = self._clock(), self._entries
        with self._lock:  # `_live` per key, inline: every turn's read passes here
            found = []
            for key in keys:
                entry = entries.get(key)
                if entry is not None:
                    if entry.expires_at is not None and now >= entry.expires_at:
                        self._drop(key)
                    else:
                        found.append((key, entry))
        items = {}
        for key, entry in found:
            if entry.data is not None:
                expires_at = entry.expires_at  # `remaining`, inline
                left = None if expires_at is None else expires_at - now
                items[key] = StoreItem(orjson.loads(entry.data), entry.etag, entry.data, left)
            else:
                envelope = unwrap(key, entry.raw or b"")
                items[key] = StoreItem(envelope.data, entry.etag, envelope.raw_data)
        return items

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        with self._lock:
            now, entries = self._clock(), self._entries
            failed = False
            for write in writes:  # `_live` and `precondition_holds`, inline: every turn's write
                current = entries.get(write.key)
                etag = None
                if current is not None:
                    if current.expires_at is not None and now >= current.expires_at:
                        self._drop(write.key)
                    else:
                        etag = current.etag
                expected = write.expected
                if expected != etag and expected != ANY:
                    outcomes[write.key] = CONFLICT
                    failed = True
            if failed:
                return
            groups = self._groups
            for write in writes:
                if write.check_only:
                    continue
                if groups is not None and write.key not in entries:
                    self._grouped(groups, write.key)
                etag = str(next(self._versions))
                expires_at = None
                if write.ttl is not None:
                    expires_at = now + write.ttl
                    heapq.heappush(self._expiries, (expires_at, etag, write.key))
                # a copy of the bytes' own size: the serializer's buffer may be 4 KB
                entries[write.key] = _Entry(etag, expires_at, bytes(memoryview(write.data)))
                outcomes[write.key] = etag
            if self._expiries:  # else no document has a TTL: nothing to drop
                self._drop_expired(now, len(writes) + SWEEP_PER_WRITE)

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        with self._lock:
            now = self._clock()
            for key in keys:
                current = self._live(key, now)
                etag = current.etag if current is not None else None
                if key in if_match and not precondition_holds(if_match[key], etag):
                    outcomes[key] = CONFLICT
                elif current is not None:
                    self._drop(key)

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        """The keys in key order, a page at a time: a listing never holds a copy of every
        key (a store-wide export runs in constant memory). A prefix inside one write group
        is listed from that group's keys alone."""
        groups, group = self._groups, self._group_under(prefix)
        if groups is not None and group is not None:
            for key in self._group_keys(groups, group, prefix):
                yield key
            return
        after = ""
        while True:
            now = self._clock()
            with self._lock:
                page = heapq.nsmallest(
                    LIST_PAGE,
                    (key for key, entry in self._entries.items()
                     if key > after and key.startswith(prefix)
                     and not expired(entry.expires_at, now)),
                )  # fmt: skip
            for key in page:
                yield key
            if len(page) < LIST_PAGE:
                return
            after = page[-1]

    def _group_keys(self, groups: dict[str, set[str]], group: str, prefix: str) -> list[str]:
        """The live keys under `prefix` in `group`, in key order."""
        now = self._clock()
        with self._lock:
            keys = groups.get(group, ())
            return sorted(
                key for key in keys
                if key.startswith(prefix) and not expired(self._entries[key].expires_at, now)
            )  # fmt: skip

    def _drop_expired(self, now: float, most: int) -> None:
        """Drop up to `most` expired documents, earliest first; rebuild the heap when it holds
        more than twice as many entries as there are documents (outdated ones, mostly)."""
        expiries, entries = self._expiries, self._entries
        for _ in range(most):
            if not expiries or expiries[0][0] > now:
                break
            _, etag, key = heapq.heappop(expiries)
            entry = entries.get(key)
            if entry is not None and entry.etag == etag:
                self._drop(key)
        if len(expiries) > 2 * len(entries) + HEAP_SLACK:
            self._expiries = [
                (entry.expires_at, entry.etag, key)
                for key, entry in entries.items()
                if entry.expires_at is not None
            ]
            heapq.heapify(self._expiries)

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and expired(entry.expires_at, now):
            self._drop(key)
            return None
        return entry

    def _drop(self, key: str) -> None:
        """Remove a stored document (and its key from its group's keys)."""
        del self._entries[key]
        if self._groups is not None:
            group = self.group_of(key)
            keys = self._groups.get(group)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._groups[group]

    def _grouped(self, groups: dict[str, set[str]], key: str) -> None:
        """Add a new key to its group's keys (a group's own key is not kept there)."""
        group = self.group_of(key)
        if group != key:
            groups.setdefault(group, set()).add(key)
