"""Store-wide backup and restore as JSON lines, streaming in constant memory.

An export is a header line, one line per document (`{"key", "version", "ttl",
"expires_at", "value"}`: the version it had, its remaining seconds and the Unix time they end
at, None for never) and an end line counting the documents, so a file cut short is told from
a whole one. `import_store` checks the whole file first (`IncompleteExportError` before
anything is written), then creates each document that the target does not hold, living until
its exported `expires_at`: a document present in the target is never overwritten (it may be
newer), so an import that stopped half way is resumed by running it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from ._errors import StateError
from .backends import ConflictError, Storage, StoreItem

EXPORT_FORMAT = 1
"""The `agent_state_export` member of an export's header line."""
BATCH = 100
"""Documents read (or written concurrently) at a time."""

Progress = Callable[[int], None]
"""Called with the number of documents handled since the last call."""


class IncompleteExportError(StateError, ValueError):
    """An export file that does not end with its end line (or whose count of documents does not
    match it): a half-finished export. Nothing was imported from it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"{path} is not a complete agent-state export: {reason}")


class UnlistableStoreError(StateError, TypeError):
    """The store cannot list its keys, which a store-wide export or a user's forget needs."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(f"{type(storage).__name__} cannot list its keys")


@dataclass(slots=True)
class BackupReport:
    """What an export wrote."""

    documents: int = 0


@dataclass(slots=True)
class RestoreReport:
    """What an import did with each document of the file."""

    written: int = 0
    present: int = 0
    """Documents the target already held (kept as they are: imported before, or newer)."""
    expired: int = 0
    """Documents whose TTL ended since the export (not written)."""


async def listing(storage: Storage, prefix: str) -> AsyncIterator[str]:
    """`storage.list(prefix)`, with `UnlistableStoreError` for a store that cannot list."""
    try:
        keys = storage.list(prefix)
        async for key in keys:
            yield key
    except NotImplementedError as exc:
        raise UnlistableStoreError(storage) from exc


def document_line(key: str, item: StoreItem, now: float) -> bytes:
    """One exported document: its key, version, remaining TTL and value, as a JSON line."""
    expires_at = None if item.ttl is None else now + item.ttl
    line = {"key": key, "version": item.etag, "ttl": item.ttl, "expires_at": expires_at,
            "value": item.value}  # fmt: skip
    return orjson.dumps(line) + b"\n"


async def export_store(
    storage: Storage, out: IO[bytes], *, prefix: str = "", progress: Progress | None = None
) -> BackupReport:
    """Write every document whose key starts with `prefix` to `out` as JSON lines (see the
    module docstring), a batch at a time; `UnlistableStoreError` for a store that cannot list."""
    report = BackupReport()
    out.write(orjson.dumps({"agent_state_export": EXPORT_FORMAT, "prefix": prefix}) + b"\n")
    batch: list[str] = []
    async for key in listing(storage, prefix):
        batch.append(key)
        if len(batch) == BATCH:
            report.documents += await _export_batch(storage, batch, out, progress)
            batch = []
    if batch:
        report.documents += await _export_batch(storage, batch, out, progress)
    out.write(orjson.dumps({"end": True, "documents": report.documents}) + b"\n")
    return report


async def _export_batch(
    storage: Storage, keys: list[str], out: IO[bytes], progress: Progress | None
) -> int:
    """Read `keys` in one batch and write the ones still stored; how many were."""
    found = await storage.read(keys)
    now = time.time()
    for key in keys:
        if key in found:
            out.write(document_line(key, found[key], now))
    if progress is not None:
        progress(len(found))
    return len(found)


def check_export(path: str | Path) -> int:
    """The number of documents of the complete export at `path`; `IncompleteExportError` for
    a file cut short, an unknown header or a line that is no exported document."""
    name = str(path)
    count, end = 0, None
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines):
            line = _parse(name, number, raw)
            if number == 0:
                if line.get("agent_state_export") != EXPORT_FORMAT:
                    raise IncompleteExportError(name, "it has no agent-state export header")
            elif end is not None:
                raise IncompleteExportError(name, f"line {number + 1} follows the end line")
            elif "end" in line:
                end = line.get("documents")
            else:
                _document(name, number, line)
                count += 1
    if end is None:
        raise IncompleteExportError(name, f"it stops after {count} documents, with no end line")
    if end != count:
        raise IncompleteExportError(name, f"its end line counts {end!r} documents, not {count}")
    return count


async def import_store(
    storage: Storage, path: str | Path, *, progress: Progress | None = None
) -> RestoreReport:
    """Create in `storage` every document of the export at `path` that it does not hold yet,
    each living until its exported expiry; checked whole first (`IncompleteExportError`)."""
    check_export(path)
    report = RestoreReport()
    name = str(path)
    with open(path, "rb") as lines:
        batch: list[tuple[str, dict[str, Any], float | None]] = []
        for number, raw in enumerate(lines):
            line = _parse(name, number, raw)
            if number == 0 or "end" in line:
                continue
            batch.append(_document(name, number, line))
            if len(batch) == BATCH:
                await _import_batch(storage, batch, report, progress)
                batch = []
        if batch:
            await _import_batch(storage, batch, report, progress)
    return report


async def _import_batch(
    storage: Storage,
    batch: list[tuple[str, dict[str, Any], float | None]],
    report: RestoreReport,
    progress: Progress | None,
) -> None:
    """Create each document of `batch` on its own (one atomic write each, concurrently)."""
    now = time.time()
    live = [(key, value, None if end is None else end - now) for key, value, end in batch]
    report.expired += sum(1 for _, _, ttl in live if ttl is not None and ttl <= 0)
    live = [entry for entry in live if entry[2] is None or entry[2] > 0]
    outcomes = await asyncio.gather(*(_create(storage, *entry) for entry in live))
    report.written += sum(outcomes)
    report.present += len(outcomes) - sum(outcomes)
    if progress is not None:
        progress(len(batch))


async def _create(storage: Storage, key: str, value: dict[str, Any], ttl: float | None) -> bool:
    """Create `key` unless it exists: whether it was written."""
    try:
        await storage.write({key: StoreItem(value, None, ttl=ttl)})
    except ConflictError:
        return False
    return True


def _parse(name: str, number: int, raw: bytes) -> dict[str, Any]:
    """Line `number` of an export as a JSON object, else `IncompleteExportError`."""
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError:
        line = None
    if not isinstance(line, dict):
        raise IncompleteExportError(name, f"line {number + 1} is not a JSON object")
    return line


def _document(
    name: str, number: int, line: dict[str, Any]
) -> tuple[str, dict[str, Any], float | None]:
    """The key, value and expiry of an exported document line, else `IncompleteExportError`."""
    key, value, end = line.get("key"), line.get("value"), line.get("expires_at")
    if not (
        isinstance(key, str)
        and isinstance(value, dict)
        and (end is None or isinstance(end, (int, float)))
    ):
        raise IncompleteExportError(name, f"line {number + 1} is not an exported document")
    return key, value, None if end is None else float(end)
