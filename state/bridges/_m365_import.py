"""Moving data in: copy what M365's own `BlobStorage` (one blob per key, named by the raw key,
holding the item's JSON) and `CosmosDBStorage` (items `{"id", "realId", "document"}`) wrote
into any of our stores, under the keys `AgentStateStorage` reads them by.

Every copy is create-only, so a run can stop anywhere and run again: what an earlier run
moved is found equal and counted, never written twice. Nothing is refused silently: a key
already holding another value, or an item that cannot be moved, is named in the report.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..backends import (
    ConflictError,
    StateTooLargeError,
    Storage,
    StorageError,
    StoreItem,
)
from ._keymap import to_storage_key
from ._m365_values import to_document


@dataclass
class ImportReport:
    """What an import did, per M365 key."""

    moved: int = 0
    """Items written into our store."""
    unchanged: int = 0
    """Items our store already held with the same value (moved by an earlier run)."""
    differing: list[str] = field(default_factory=list)
    """Keys our store already held with another value: left as they are."""
    refused: dict[str, str] = field(default_factory=dict)
    """Keys not moved, with why (not JSON, a null document, a value our store refuses)."""

    @property
    def seen(self) -> int:
        """How many source items the import went through."""
        return self.moved + self.unchanged + len(self.differing) + len(self.refused)

    @property
    def complete(self) -> bool:
        """Whether every source item is now in our store with its value."""
        return not self.differing and not self.refused


async def import_m365_blobs(
    container: Any,
    storage: Storage,
    *,
    namespace: str | None = None,
    prefix: str = "",
    concurrency: int = 8,
) -> ImportReport:
    """Copy the blobs of an `azure.storage.blob.aio.ContainerClient` that M365's BlobStorage
    wrote (those whose name starts with `prefix`) into `storage`; see the module doc."""

    async def items() -> AsyncIterator[tuple[str, Awaitable[Any]]]:
        async for blob in container.list_blobs(name_starts_with=prefix or None):
            yield blob.name, _download(container, blob.name)

    return await _import(items(), storage, namespace, concurrency)


async def import_m365_cosmos(
    container: Any, storage: Storage, *, namespace: str | None = None, concurrency: int = 8
) -> ImportReport:
    """Copy the items of an `azure.cosmos.aio.ContainerProxy` that M365's CosmosDBStorage
    wrote (`realId` the key, `document` the value) into `storage`; see the module doc."""

    async def items() -> AsyncIterator[tuple[str, Awaitable[Any]]]:
        async for item in container.read_all_items():
            key = item.get("realId") if isinstance(item, dict) else None
            if not isinstance(key, str):
                key = f"(item id {item.get('id')!r} has no realId)"
                yield key, _fail("not an item M365's CosmosDBStorage wrote")
            else:
                yield key, _ready(item.get("document"))

    return await _import(items(), storage, namespace, concurrency)


async def _import(
    source: AsyncIterator[tuple[str, Awaitable[Any]]],
    storage: Storage,
    namespace: str | None,
    concurrency: int,
) -> ImportReport:
    if type(concurrency) is not int or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    report = ImportReport()
    slots = asyncio.Semaphore(concurrency)
    pending: set[asyncio.Task[None]] = set()
    async for key, value in source:
        await slots.acquire()
        task = asyncio.ensure_future(_copy(key, value, storage, namespace, report))
        task.add_done_callback(lambda _: slots.release())
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)
    return report


async def _copy(
    key: str, value: Awaitable[Any], storage: Storage, namespace: str | None, report: ImportReport
) -> None:
    """Move one item create-only; record what happened to it in `report`."""
    try:
        loaded = await value
        if loaded is None:
            raise _Refused("the document is null (M365 reads it as missing)")
        ours = to_storage_key(key, namespace)
        document = to_document(loaded)
        try:
            await storage.write({ours: StoreItem(document, None)})
        except ConflictError:
            found = (await storage.read([ours])).get(ours)
            if found is not None and found.value == document:
                report.unchanged += 1
            else:
                report.differing.append(key)
            return
        report.moved += 1
    except (_Refused, ValueError, TypeError, StorageError) as exc:
        if isinstance(exc, StorageError) and not _refusal(exc):
            raise
        report.refused[key] = str(exc) or type(exc).__name__


def _refusal(exc: StorageError) -> bool:
    """Whether a storage error is about the item (its key or value), not the store."""
    return isinstance(exc, (ValueError, TypeError, StateTooLargeError))


class _Refused(Exception):
    """An item that cannot be moved, and why."""


async def _download(container: Any, name: str) -> Any:
    stream = await container.download_blob(name)
    data = await stream.readall()
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _Refused(f"the blob is not JSON: {exc}") from None


async def _ready(value: Any) -> Any:
    return value


async def _fail(reason: str) -> Any:
    raise _Refused(reason)
