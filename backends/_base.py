"""The storage contract: batched reads, conditional writes, deletes, listing, TTL.

`Storage` validates every argument and serializes every document before calling the
backend's primitives, so bad input fails before any I/O and a size guard fails before
anything of the batch is written.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ._envelope import dump_data
from ._errors import InvalidValueError, StateTooLargeError, StorageUnavailableError
from ._keys import check_key, check_keys, check_prefix

ANY = "*"
"""Precondition for an unconditional write."""


@dataclass(slots=True)
class StoreItem:
    """A JSON document and its version.

    On `write`, `etag` is the precondition: a version string (write only if the stored
    version is still that one), `None` (only if the key does not exist) or `"*"` (always).
    """

    value: dict[str, Any]
    etag: str | None = None


@dataclass(slots=True)
class SharedItem(StoreItem):
    """What `read_shared` returns: a value that may be shared, and its serialized `data`.

    `data` is the stored document's JSON bytes where the backend holds them at no cost, else
    None. For documents written by this library it equals `orjson.dumps(value)`; callers that
    use it as a change baseline get at worst a redundant write if a backend's bytes differ.
    """

    data: bytes | None = None


@dataclass(slots=True)
class EncodedItem(StoreItem):
    """A change whose value the framework already serialized: `data` is `orjson.dumps(value)`.

    Internal to agent-state (buckets build it): `write` stores `data` as it is, after the size
    check, instead of serializing `value` again, so the two must agree.
    """

    data: bytes = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """A validated write handed to a backend: key, serialized data and precondition."""

    key: str
    data: bytes
    expected: str | None


class Storage(ABC):
    """Base class of every backend; subclasses implement the `_`-prefixed primitives."""

    max_document_bytes: int = 16 * 1024 * 1024
    """Largest serialized document this backend accepts."""

    max_ttl_seconds: float = math.inf
    """Longest `ttl` this backend can keep; a longer one raises `InvalidValueError` before I/O."""

    atomic_batches: bool = False
    """True where a whole `write` batch is applied all-or-nothing."""

    _closed: bool = False

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        """Read a batch of keys; missing keys are absent from the result."""
        batch = self._batch(keys)
        return await self._read(batch) if batch else {}

    async def read_shared(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        """`read` for trusted framework callers, which may skip copying the documents.

        Values may be shared with the store and with other callers: treat them as immutable.
        Backends that keep decoded documents return `SharedItem`s; this default returns
        `read`'s fresh copies, which are trivially shareable.
        """
        return await self.read(keys)

    async def write(
        self, changes: Mapping[str, StoreItem], *, ttl: float | None = None
    ) -> dict[str, str]:
        """Write a batch conditionally; return each key's new etag.

        Raises `ConflictError` naming the keys whose precondition failed (and which keys
        of the batch were written), after writing the others.
        """
        if not isinstance(changes, Mapping):
            raise InvalidValueError("write() takes a mapping of key -> StoreItem")
        prepared = [self._prepare(key, item) for key, item in changes.items()]
        ttl = _check_ttl(ttl, self.max_ttl_seconds)
        self._check_open()
        return await self._write(prepared, ttl) if prepared else {}

    async def delete(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        """Delete keys (missing ones are no-ops); `if_match` gives per-key etag preconditions."""
        checked = check_keys(keys)
        conditions = dict(if_match or {})
        for key, etag in conditions.items():
            if key not in checked or not isinstance(etag, str) or etag == ANY:
                raise InvalidValueError(
                    f"if_match[{key!r}] must be a version string of a key being deleted"
                )
        self._check_open()
        if checked:
            await self._delete(list(dict.fromkeys(checked)), conditions)

    def list(self, prefix: str = "") -> AsyncIterator[str]:
        """Iterate the keys that start with `prefix` (for background jobs and scans)."""
        check_prefix(prefix)
        self._check_open()
        return self._list(prefix)

    async def close(self) -> None:
        """Release connections and files; the storage is unusable afterwards."""
        if not self._closed:
            self._closed = True
            await self._close()

    async def __aenter__(self) -> Storage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _prepare(self, key: str, item: StoreItem) -> PreparedWrite:
        return PreparedWrite(key, self._encode(key, item), item.etag)

    def _encode(self, key: str, item: StoreItem) -> bytes:
        """Validate one change and give its serialized value, within the size guard."""
        check_key(key)
        if not isinstance(item, StoreItem):
            raise InvalidValueError(f"change for key {key!r} must be a StoreItem")
        if item.etag is not None and (not isinstance(item.etag, str) or not item.etag):
            raise InvalidValueError(f"etag for key {key!r} must be a non-empty str, '*' or None")
        if isinstance(item, EncodedItem):
            if not isinstance(item.value, dict) or not isinstance(item.data, bytes):
                raise InvalidValueError(f"encoded change for key {key!r} needs a dict and bytes")
            data = item.data
        else:
            data = dump_data(key, item.value)
        if len(data) > self.max_document_bytes:
            raise StateTooLargeError(key, len(data), self.max_document_bytes)
        return data

    def _batch(self, keys: Iterable[str]) -> list[str]:
        """The keys of a read, validated and without duplicates, on an open storage."""
        checked = check_keys(keys)
        self._check_open()
        return list(dict.fromkeys(checked))

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"{type(self).__name__} is closed")

    @abstractmethod
    async def _read(self, keys: list[str]) -> dict[str, StoreItem]: ...

    @abstractmethod
    async def _write(self, writes: list[PreparedWrite], ttl: float | None) -> dict[str, str]: ...

    @abstractmethod
    async def _delete(self, keys: list[str], if_match: dict[str, str]) -> None: ...

    @abstractmethod
    def _list(self, prefix: str) -> AsyncIterator[str]: ...

    async def _close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release resources; backends with connections override it."""


def _check_ttl(ttl: float | None, longest: float) -> float | None:
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise InvalidValueError(f"ttl must be a finite number of seconds, got {ttl!r}")
    if ttl <= 0:
        raise InvalidValueError(f"ttl must be positive, got {ttl!r}")
    if ttl > longest:
        raise InvalidValueError(f"ttl {ttl!r} is longer than this backend keeps ({longest:g} s)")
    return float(ttl)
