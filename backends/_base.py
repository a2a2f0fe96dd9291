"""The storage contract: batched reads, conditional writes, deletes, listing, TTL.

`Storage` validates every argument and serializes every document before calling the
backend's primitives, so bad input fails before any I/O and a size guard fails before
anything of the batch is written. Primitives report per-key outcomes; this class alone
turns them into `ConflictError`, and tells a caller which keys an I/O failure left written.

The framework's turns take one internal path through the same two methods: keys it built
and checked itself come as `BuiltKeys`, a batch it encoded itself as `BuiltWrites` (both in
`_items`, not exported). Those skip only the checks the framework already made (key shape,
etags, the bytes of each document); the size guard, TTLs, the reserved intent member and
write groups hold on every path, and anything else (a list, a dict, a subclass) is checked.
"""

from __future__ import annotations

import asyncio
import math
import time
from abc import ABC, abstractmethod
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from functools import lru_cache
from types import TracebackType
from typing import Protocol, TypeVar, runtime_checkable

from ._commit import INTENT, RECORDS, SYSTEM_CLOCK, Clock, commit, read_settled
from ._envelope import dump_data
from ._errors import (
    ConflictError,
    InvalidKeyError,
    InvalidValueError,
    StateTooLargeError,
    StorageConfigError,
    StorageUnavailableError,
)
from ._items import ANY, CONFLICT, BuiltKeys, BuiltWrites, Outcomes, PreparedWrite, StoreItem
from ._keys import KEYS_REMEMBERED, check_key, check_keys, check_prefix

T = TypeVar("T")

WriteGroup = Callable[[str], str]
"""Maps a key to its write group: its first segments (a prefix ending at a `/` or the whole
key), naming the keys one atomic write can hold together (a Redis hash slot, a Cosmos DB
partition). It must depend on the key alone: backends derive where a key lives from it."""


@runtime_checkable
class PrefixGroups(Protocol):
    """A write group rule that can also name the one group of every key under a prefix
    (`agent_state.write_group` can): a backend that keeps each group's keys (Redis, memory)
    lists such a prefix from them rather than walking the whole store."""

    def prefix_group(self, prefix: str) -> str | None:
        """The group of every key that starts with `prefix`; None when they may differ."""


def whole_key(key: str) -> str:
    """The default write group: every key on its own."""
    return key


def missing_write_group(backend: str) -> StorageConfigError:
    """The error of a storage whose layout depends on the write group, built without one."""
    return StorageConfigError(
        f"{backend} places each key by its write group, so every client of one store must"
        " pass the same write_group=: agent_state.write_group (the key scheme's rule, which"
        " open_storage passes), or agent_state.backends.whole_key (one key per group)"
    )


_RECORDS = RECORDS + "/"
_Documents = list  # the builtin, before `Storage.list` shadows the name in the class body


def expired(expires_at: float | None, now: float | None = None) -> bool:
    """Whether a document with this expiry (Unix time, None for never) is gone at `now`."""
    return expires_at is not None and (time.time() if now is None else now) >= expires_at


async def gather_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await every call (concurrently if several), then raise the first error: so what the
    others wrote is in the outcomes before a failure is reported."""
    if len(calls) == 1:
        return [await calls[0]]
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


class Storage(ABC):
    """Base class of every backend; subclasses implement the `_`-prefixed primitives."""

    max_document_bytes: int = 16 * 1024 * 1024
    """Largest serialized document this backend accepts."""

    max_ttl_seconds: float = math.inf
    """Longest `ttl` this backend can keep; a longer one raises `InvalidValueError` before I/O."""

    atomic_batches: bool = False
    """True where the store applies a whole `write` batch in one atomic step. Elsewhere a
    batch spanning several keys (or groups) is committed through intents (`_commit`):
    all-or-nothing on every backend."""

    atomic_groups: bool = False
    """True where the store applies the keys of one write group in one atomic step."""

    intent_timeout: float = 5.0
    """Seconds a commit across atomic units may take before readers abort it (`_commit`): a
    reader waits for it at most this long on its own clock, whatever the writer's says."""

    clock: Clock = SYSTEM_CLOCK
    """The clocks commits and their readers read, and the file and Blob stores decide TTLs on
    (tests give a store other ones)."""

    supports_ttl: bool = True
    """Whether `write(..., ttl=...)` is kept (every built-in backend keeps it)."""

    needs_write_group: bool = False
    """True where the place of a key depends on its write group (a Redis hash tag, a Cosmos DB
    partition key): built without `write_group`, the storage raises `StorageConfigError`
    rather than pick one that other clients of the store may not share."""

    indexes_groups: bool = False
    """True where the store indexes each write group's keys in the writes themselves (Redis):
    `agent_state.regroup` writes again the documents of a store written before it did."""

    _closed: bool = False

    def __init__(
        self, *, write_group: WriteGroup | None = None, max_document_bytes: int | None = None
    ) -> None:
        if write_group is None and self.needs_write_group:
            raise missing_write_group(type(self).__name__)
        if write_group is not None and not callable(write_group):
            raise InvalidValueError("write_group must be a function key -> group")
        self.write_group: WriteGroup = write_group or whole_key
        self.group_of: Callable[[str], str] = lru_cache(maxsize=KEYS_REMEMBERED)(self._group_of)
        """The write group of a (valid) key: `write_group(key)`, checked to be a run of the
        key's first segments (remembered per key, since it depends on the key alone)."""
        self._prefix_group = (
            self.write_group.prefix_group if isinstance(self.write_group, PrefixGroups) else None
        )
        if max_document_bytes is not None:
            if type(max_document_bytes) is not int or max_document_bytes < 2:
                raise InvalidValueError("max_document_bytes must be an int >= 2")
            self.max_document_bytes = max_document_bytes

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        """Read a batch of keys; missing keys are absent. Values are the caller's own.
        `BuiltKeys` (the framework's, distinct and checked when built) are taken as given."""
        if type(keys) is BuiltKeys:  # the framework's own keys, checked when built
            batch = list(keys)
        else:
            batch = list(dict.fromkeys(check_keys(keys)))
        if self._closed:
            self._check_open()
        return await read_settled(self, batch) if batch else {}

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        """Write a batch conditionally; return each key's new etag.

        All or nothing on every backend: `ConflictError` names the keys whose precondition
        failed (and those a refused commit put back under a new version), and nothing was
        written. `unchanged` maps keys the batch must not write but
        that must still be at a version (None: still absent) when it lands: a failed check is
        a conflict of that key. A `StorageUnavailableError` may leave the batch in doubt:
        readers then see all of it or none of it. A `BuiltWrites` batch passed with its own
        `unchanged` is the framework's (see the module docstring): checked by `_built`.
        """
        built = None
        if type(changes) is BuiltWrites and unchanged is changes.unchanged:
            built = changes  # the framework's own batch (see the module docstring)
        elif type(changes) is not dict and not isinstance(changes, Mapping):
            raise InvalidValueError("write() takes a mapping of key -> StoreItem")  # ABCs cost
        if ttl is not None:
            ttl = _check_ttl(ttl, self.max_ttl_seconds)
        if built is not None:
            prepared, checks = self._built(built, ttl)
        else:
            prepared = [self._prepare(key, item, ttl) for key, item in changes.items()]
            checks = self._checks(unchanged, changes) if unchanged is not None else []
        if self._closed:
            self._check_open()
        if not prepared:
            return {}
        outcomes: Outcomes = {}
        if self.atomic_batches:
            await self._write(prepared + checks, outcomes)
        elif checks or not self._one_unit(prepared):
            await commit(self, prepared, checks, outcomes)
        else:
            await self._write(prepared, outcomes)
        if CONFLICT in outcomes.values():  # else no key of the batch failed
            failed = [p.key for p in (*prepared, *checks) if outcomes.get(p.key) is CONFLICT]
            if failed:
                raise ConflictError(failed)
        return {write.key: outcomes[write.key] for write in prepared}  # type: ignore[misc]

    def _checks(
        self, unchanged: Mapping[str, str | None], changes: Mapping[str, StoreItem]
    ) -> list[PreparedWrite]:
        """The read checks of `write(unchanged=...)`, validated like writes."""
        if not isinstance(unchanged, Mapping):
            raise InvalidValueError("unchanged must be a mapping of key -> etag or None")
        checks = []
        for key, etag in unchanged.items():
            check_key(key)
            if key in changes:
                raise InvalidValueError(f"key {key!r} is both written and checked unchanged")
            if etag is not None and (not isinstance(etag, str) or not etag or etag == ANY):
                raise InvalidValueError(f"unchanged[{key!r}] must be a version string or None")
            checks.append(PreparedWrite(key, b"", {}, etag, self.group_of(key), None, True))
        return checks

    async def delete(
        self, keys: Iterable[str], *, if_match: Mapping[str, str] | None = None
    ) -> None:
        """Delete keys (missing ones are no-ops); `if_match` gives per-key etag preconditions."""
        checked = list(dict.fromkeys(check_keys(keys)))
        if if_match is not None and not isinstance(if_match, Mapping):
            raise InvalidValueError("if_match must be a mapping of key -> etag")
        conditions = dict(if_match or {})
        for key, etag in conditions.items():
            if key not in checked or not isinstance(etag, str) or not etag or etag == ANY:
                raise InvalidValueError(
                    f"if_match[{key!r}] must be a version string of a key being deleted"
                )
        self._check_open()
        if not checked:
            return
        outcomes: Outcomes = {}
        await self._delete(checked, conditions, outcomes)
        failed = [key for key in checked if outcomes.get(key) is CONFLICT]
        if failed:
            raise ConflictError(failed, message="delete precondition failed")

    def list(self, prefix: str = "") -> AsyncIterator[str]:
        """Iterate the keys that start with `prefix` (for background jobs and scans)."""
        check_prefix(prefix)
        self._check_open()
        return self._live_keys(prefix)

    async def _live_keys(self, prefix: str) -> AsyncIterator[str]:
        """`_list`, without the commit records of `_commit` (the store's own bookkeeping)."""
        async for key in self._list(prefix):
            if not key.startswith(_RECORDS):
                yield key

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

    def _one_unit(self, writes: _Documents[PreparedWrite]) -> bool:
        """Whether the store applies `writes` in one atomic step: one key, or one write group
        where groups are atomic."""
        if len(writes) == 1:
            return True
        return self.atomic_groups and len({write.group for write in writes}) == 1

    def _group_under(self, prefix: str) -> str | None:
        """The one write group every key under `prefix` lies in, below the group's own key
        (the prefix starts with `group + "/"`), as the write group rule names it
        (`PrefixGroups`); None when the rule does not, or the keys may lie in several."""
        if self._prefix_group is None:
            return None
        group = self._prefix_group(prefix)
        return group if group is not None and prefix.startswith(group + "/") else None

    def _group_of(self, key: str) -> str:
        group = self.write_group(key)
        if not (
            isinstance(group, str)
            and group
            and key.startswith(group)
            and (len(key) == len(group) or key[len(group)] == "/")
        ):
            raise InvalidKeyError(
                f"write_group({key!r}) gave {group!r}, not a run of the key's first segments"
            )
        return group

    def _prepare(self, key: str, item: StoreItem, ttl: float | None = None) -> PreparedWrite:
        """Validate one change and serialize it (or check its bytes), within the size guard."""
        check_key(key)
        if not isinstance(item, StoreItem):
            raise InvalidValueError(f"change for key {key!r} must be a StoreItem")
        if isinstance(item.value, dict) and INTENT in item.value:
            raise InvalidValueError(f"value for key {key!r} has the reserved member {INTENT!r}")
        etag = item.etag
        if etag is not None and (not isinstance(etag, str) or not etag):
            raise InvalidValueError(f"etag for key {key!r} must be a non-empty str, '*' or None")
        data = item.data
        if data is None:
            data = dump_data(key, item.value)
        elif not (
            isinstance(item.value, dict)
            and isinstance(data, bytes)
            and data[:1] == b"{"
            and data[-1:] == b"}"
        ):
            raise InvalidValueError(f"encoded change for key {key!r} needs a dict and its JSON")
        if len(data) > self.max_document_bytes:
            raise StateTooLargeError(key, len(data), self.max_document_bytes)
        if item.ttl is not None:
            ttl = _check_ttl(item.ttl, self.max_ttl_seconds)
        return PreparedWrite(key, data, item.value, etag, self.group_of(key), ttl)

    def _built(
        self, changes: BuiltWrites, ttl: float | None
    ) -> tuple[_Documents[PreparedWrite], _Documents[PreparedWrite]]:
        """`_prepare` and `_checks` for a batch the framework built (see `BuiltWrites`): its
        keys, etags and bytes were checked when built; this storage's guards still apply."""
        group_of, largest = self.group_of, self.max_document_bytes
        prepared = []
        for key, item in dict.items(changes):
            value, data = item.value, item.data
            if INTENT in value:
                raise InvalidValueError(f"value for key {key!r} has the reserved member {INTENT!r}")
            if data is None:
                data = dump_data(key, value)
            if len(data) > largest:
                raise StateTooLargeError(key, len(data), largest)
            lives = ttl if item.ttl is None else _check_ttl(item.ttl, self.max_ttl_seconds)
            prepared.append(PreparedWrite(key, data, value, item.etag, group_of(key), lives))
        checks = [
            PreparedWrite(key, b"", {}, etag, group_of(key), None, True)
            for key, etag in (changes.unchanged or {}).items()
        ]
        return prepared, checks

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"{type(self).__name__} is closed")

    @abstractmethod
    async def _read(self, keys: _Documents[str]) -> dict[str, StoreItem]:
        """Fetch existing, unexpired keys as fresh `StoreItem`s (never shared with the store)."""

    @abstractmethod
    async def _write(self, writes: _Documents[PreparedWrite], outcomes: Outcomes) -> None:
        """Apply the writes whose preconditions hold, recording each key's outcome as it goes."""

    @abstractmethod
    async def _delete(
        self, keys: _Documents[str], if_match: dict[str, str], outcomes: Outcomes
    ) -> None:
        """Delete keys (expected etag in `if_match`, else unconditionally); mark `CONFLICT`s."""

    @abstractmethod
    def _list(self, prefix: str) -> AsyncIterator[str]:
        """Yield the live keys starting with `prefix`, each once."""

    async def _close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release resources; backends with connections override it."""


def _check_ttl(ttl: float, longest: float) -> float:
    """`ttl` as a float, if it is a positive, finite number of seconds this backend keeps."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl):
        raise InvalidValueError(f"ttl must be a finite number of seconds, got {ttl!r}")
    if ttl <= 0:
        raise InvalidValueError(f"ttl must be positive, got {ttl!r}")
    if ttl > longest:
        raise InvalidValueError(f"ttl {ttl!r} is longer than this backend keeps ({longest:g} s)")
    return float(ttl)
