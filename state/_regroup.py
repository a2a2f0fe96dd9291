"""Bring a store that agent-state 0.1.0 wrote to today's write groups, on the backends that place
a key by its group (Redis, Cosmos DB).

In 0.1.0 a user's records (`U/sessions/...`, `U/agui-threads...`, `U/forgetting`) were each
their own write group; now they share the user's (`write_group`), and Redis keeps an index of
each group's keys. `regroup` reads every document where the 0.1.0 rule placed it and, for a
key whose group changed, writes it to its place now (only if nothing is there: a copy already
moved wins) and then deletes the earlier copy at the version it read; on Redis it writes every
other document of a group once more, which indexes it. Each document is done on its own, so
an interrupted run is finished by running it again. Run it with no writer of the store up. A
file store lays itself out by group at its first open with a rule (`backends/file/layout.py`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from ._backup import Progress, listing
from .backends import ConflictError, Storage, StoreItem

BATCH = 100
"""Documents read and moved at a time."""


def earlier_write_group(key: str) -> str:
    """The 0.1.0 rule: a conversation's key for it and every key under it, else the key."""
    parts = key.split("/")
    for i in (1, 2):
        if len(parts) > i + 2 and parts[i] == "conversations":
            return "/".join(parts[: i + 2])
    return key


@dataclass(slots=True)
class RegroupReport:
    """What a run did: documents `moved` to their group now, `rewritten` in place (Redis's
    index), and those already `current`."""

    moved: int = 0
    rewritten: int = 0
    current: int = 0


async def regroup(
    storage: Storage, earlier: Storage, *, prefix: str = "", progress: Progress | None = None
) -> RegroupReport:
    """Move the documents under `prefix` from where `earlier` (the same store, opened with
    `write_group=earlier_write_group`) places them to where `storage` does."""
    report = RegroupReport()
    if not storage.needs_write_group:  # the place of a key does not depend on its group
        return report
    batch: list[str] = []
    async for key in listing(earlier, prefix):
        batch.append(key)
        if len(batch) == BATCH:
            await _regroup_batch(storage, earlier, batch, report, progress)
            batch = []
    await _regroup_batch(storage, earlier, batch, report, progress)
    return report


async def _regroup_batch(
    storage: Storage,
    earlier: Storage,
    keys: list[str],
    report: RegroupReport,
    progress: Progress | None,
) -> None:
    found = await earlier.read(keys)
    moving = {key for key in found if earlier.group_of(key) != storage.group_of(key)}
    indexing = [
        key
        for key in found
        if storage.indexes_groups and key not in moving and storage.group_of(key) != key
    ]
    await asyncio.gather(
        *(_move(storage, earlier, key, found[key]) for key in moving),
        *(_rewrite(storage, key, found[key]) for key in indexing),
    )
    report.moved += len(moving)
    report.rewritten += len(indexing)
    report.current += len(found) - len(moving) - len(indexing)
    if progress is not None and found:
        progress(len(found))


async def _move(storage: Storage, earlier: Storage, key: str, item: StoreItem) -> None:
    """Write `item` where `storage` places `key`, unless a copy is there, then delete the one
    `earlier` placed, at the version read."""
    try:
        await storage.write({key: StoreItem(item.value, None)}, ttl=item.ttl)
    except ConflictError:
        pass  # moved by an earlier run: that copy is kept
    await earlier.delete([key], if_match={key: item.etag or "*"})


async def _rewrite(storage: Storage, key: str, item: StoreItem) -> None:
    """Write `item` again in its place, at the version read (a document that changed since is
    left as it is: the write that changed it indexed it)."""
    try:
        await storage.write({key: StoreItem(item.value, item.etag)}, ttl=item.ttl)
    except ConflictError:
        pass
