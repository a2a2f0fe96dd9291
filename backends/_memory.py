"""In-process storage for tests and local development, with the semantics of a real store.

Documents are kept serialized, and `read` decodes a fresh copy, so nothing `read` or `write`
hands over aliases stored data; the envelope every backend stores is built around them when
asked for (`_Entry.raw`). Versions are counters that never repeat; TTL is honoured. For
`read_shared`, each entry also keeps its decoded document, decoded once and never mutated; a
write that still holds some of its members (by identity) reuses them, so a turn that changed
one member of a large document does not make the next turn decode all of it.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ._base import ANY, PreparedWrite, SharedItem, Storage, StoreItem
from ._envelope import unwrap, wrap
from ._errors import ConflictError

_MISSING = object()
_IMMUTABLE = (str, int, float, bool, type(None))
_CONTAINERS = (dict, list)


class _Entry:
    """One stored document: written serialized `data` or planted envelope bytes (`raw`).

    `tree` is the decoded document shared by `read_shared` callers, made when first needed;
    `raw` is built from `data` when first asked for.
    """

    __slots__ = ("_raw", "etag", "expires_at", "data", "tree", "_key", "_updated_at")

    def __init__(
        self,
        raw: bytes | None,
        etag: str,
        expires_at: float | None,
        data: bytes | None = None,
        tree: dict[str, Any] | None = None,
        *,
        key: str = "",
        updated_at: float = 0.0,
    ) -> None:
        self._raw, self.etag, self.expires_at = raw, etag, expires_at
        self.data, self.tree = data, tree
        self._key, self._updated_at = key, updated_at

    @property
    def raw(self) -> bytes:
        """The envelope bytes, as every backend stores them."""
        if self._raw is None:
            assert self.data is not None
            self._raw = wrap(self._key, self.data, updated_at=self._updated_at)
        return self._raw

    def alive(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at

    def fresh(self, key: str) -> StoreItem:
        """A private copy of the document, decoded from the stored bytes (the tree is untouched)."""
        data = orjson.loads(self.data) if self.data is not None else unwrap(key, self.raw).data
        return StoreItem(data, self.etag)

    def shared(self, key: str) -> SharedItem:
        """The decoded document, decoded on first use (nobody may mutate it), and its data."""
        if self.tree is None:
            data = self.data
            self.tree = orjson.loads(data) if data is not None else unwrap(key, self.raw).data
        if self.data is None:
            self.data = orjson.dumps(self.tree)
        return SharedItem(self.tree, self.etag, self.data)


@dataclass(frozen=True, slots=True)
class _MemoryWrite(PreparedWrite):
    value: dict[str, Any]
    """The value `data` was serialized from, to build the entry's decoded document from."""


class MemoryStorage(Storage):
    """A dict behind a lock; safe for many tasks and threads, isolated per instance."""

    def __init__(self, *, max_document_bytes: int | None = None) -> None:
        if max_document_bytes is not None:
            self.max_document_bytes = max_document_bytes
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self._versions = itertools.count(1)

    async def read_shared(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        """`read` without copying: each entry's one decoded document, with its serialized data."""
        found = self._find(self._batch(keys))
        return {key: entry.shared(key) for key, entry in found if entry is not None}

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        return {key: entry.fresh(key) for key, entry in self._find(keys) if entry is not None}

    def _prepare(self, key: str, item: StoreItem) -> PreparedWrite:
        return _MemoryWrite(key, self._encode(key, item), item.etag, item.value)

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
                tree = None
                if isinstance(write, _MemoryWrite):
                    tree = _reuse(write.value, current.tree if current is not None else None)
                self._entries[write.key] = _Entry(
                    None, etag, expires_at, write.data, tree, key=write.key, updated_at=time.time()
                )
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
                key
                for key, entry in self._entries.items()
                if key.startswith(prefix) and entry.alive(now)
            )
        for key in keys:
            yield key

    def _find(self, keys: list[str]) -> list[tuple[str, _Entry | None]]:
        now = time.monotonic()
        with self._lock:
            return [(key, self._live(key, now)) for key in keys]

    def _live(self, key: str, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and not entry.alive(now):
            del self._entries[key]
            return None
        return entry


def _reuse(value: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decoded form of `value`, sharing the containers it still holds of the decoded `old`.

    Members identical to `old`'s are the store's own, never mutated, so they are reused;
    immutable scalars are kept; other members are copied, so nothing the caller holds is kept
    (and a NaN becomes the null that `data` holds).
    None when that would copy containers without reusing any: decoding later costs no more.
    """
    old = old if old is not None else {}
    reused = copied = False
    for name, member in value.items():
        if isinstance(member, _CONTAINERS):
            if member is old.get(name, _MISSING):
                reused = True
            else:
                copied = True
    if copied and not reused:
        return None
    return {
        name: member
        if _kept(member) or member is old.get(name, _MISSING)
        else orjson.loads(orjson.dumps(member))
        for name, member in value.items()
    }


def _kept(member: object) -> bool:
    """Whether `member` decodes from its JSON as itself: an immutable scalar, not NaN or ±inf."""
    kind = type(member)
    return kind in _IMMUTABLE and (kind is not float or math.isfinite(member))  # type: ignore[arg-type]


def _precondition_holds(expected: str | None, current: _Entry | None) -> bool:
    if expected == ANY:
        return True
    if expected is None:
        return current is None
    return current is not None and current.etag == expected
