"""A user's data and the whole store: forget one user among many, export and import in
constant memory.

Forget: one user with 10 sessions (each made by a real turn: user, conversation and session
buckets, history, the delivery record of the reply, the user's index entry) among 2,000 and
among 20,000 other users (each seeded through the storage API: user bucket, session bucket,
index entry), on MemoryStorage, FileStorage and Redis: with today's write groups (a user's
records in one group, listed from its index) and with 0.1.0's (listed by `SCAN`, what an
un-regrouped store does). Printed: the user's own documents, keys listed and read by
`forget_user`, that count over the user's documents (target <= 3x), the ratio between the two
sizes (target <= 1.2x), the `SCAN` steps the Redis server ran (each walks up to 1,000 keys of
the whole keyspace), the forget's time and its ratio between the two sizes, and whether a raw
scan of the store after the forget finds the user's id or any text they sent (target: no).

Backup: `export_store` of 10,000, 100,000 and 200,000 documents of a MemoryStorage to a file
(tracemalloc's peak during the export; the source's documents were stored before tracing
began) and `import_store` of that file: its time into a fresh MemoryStorage, and its memory
into a `CountingStorage`, a store that keeps nothing in this process. Into MemoryStorage the
peak would count the store: its documents (340 bytes each), the resizes of its table of
entries (1.9 MB above the running total at 87,400 documents) and the process-wide caches of
keys (a `_REMEMBERED` table of 0.2 MB emptied every 8,192 keys). The import's peak is traced
since before an import of `WARM_UP` other documents, so that every size meets the storage
layer's caches of keys at their largest (`backends/_keys.py`: at most 8,192 keys each,
emptied or evicted when full; most of the ~2 MB) and the rows compare what the import holds
beside them: a batch of 100 documents. Target: the peak at 100,000 within 1.5x of the peak
at 10,000 (200,000 shows the trend). The export's peak holds the same caches.

Run: .venv/bin/python benchmarks/lifecycle.py [--redis-url URL] (default $AGENT_STATE_REDIS_URL;
without either it starts a private redis-server, so the keyspace is the benchmark's own)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
from _support import redis_server

from agent_state import (
    AgentApplication,
    TurnContext,
    TurnState,
    earlier_write_group,
    export_store,
    forget_user,
    import_store,
    session_key,
    user_key,
    write_group,
)
from agent_state.backends import (
    FileStorage,
    MemoryStorage,
    Outcomes,
    PreparedWrite,
    RedisStorage,
    Storage,
    StoreItem,
    WriteGroup,
)
from agent_state.backends._keys import KEYS_REMEMBERED

CHANNEL = "t"

SESSIONS = 10
SIZES = (2_000, 20_000)
BACKUP_SIZES = (10_000, 100_000, 200_000)
AT_ONCE = 200
WARM_UP = 4 * KEYS_REMEMBERED
"""Documents imported before the measured import: enough for the storage layer's caches of
keys (`KEYS_REMEMBERED` each, emptied or evicted when full) to go round several times."""


def application(storage: Storage) -> AgentApplication:
    """A turn writes every bucket, appends the text to the history and echoes it."""
    app = AgentApplication(storage, app_name="lifecycle")

    @app.message()
    async def turn(ctx: TurnContext, state: TurnState) -> None:
        state["user:turns"] = state.get("user.turns", 0) + 1
        state["conversation:turns"] = state.get("conversation.turns", 0) + 1
        state["last"] = ctx.text
        await state.history.append({"id": ctx.activity.id, "role": "user", "content": ctx.text})
        await ctx.send(f"you said {ctx.text}")

    return app


def activity(user: str, conversation: str, text: str) -> dict[str, object]:
    return {"type": "message", "id": f"{conversation}-{text}", "channelId": CHANNEL,
            "from": {"id": user}, "recipient": {"id": "bot"},
            "conversation": {"id": conversation}, "text": text}  # fmt: skip


async def leftovers(storage: Storage, user: str, texts: list[str]) -> bool:
    """Whether any stored key or document holds the user's id or one of their texts."""
    needles = [user.encode(), *(text.encode() for text in texts)]
    keys = [key async for key in storage.list("")]
    if any(user in key for key in keys):
        return True
    for start in range(0, len(keys), AT_ONCE):
        for item in (await storage.read(keys[start : start + AT_ONCE])).values():
            data = orjson.dumps(item.value)
            if any(needle in data for needle in needles):
                return True
    return False


async def seed_others(storage: Storage, users: int) -> None:
    """`users` other users, each with a user bucket, one session and its index entry."""
    writes = []
    for i in range(users):
        user, conversation = f"other-{i}", f"oc-{i}"
        session = session_key(CHANNEL, conversation, user)
        writes += [
            {user_key(CHANNEL, user): StoreItem({"turns": 1})},
            {session: StoreItem({"last": f"hello {i}"})},
            {f"{user_key(CHANNEL, user)}/sessions/{conversation}": StoreItem({"session": session})},
        ]
    for start in range(0, len(writes), AT_ONCE):
        await asyncio.gather(*(storage.write(w) for w in writes[start : start + AT_ONCE]))


async def forget_row(storage: Storage, others: int) -> Forgot:
    """Seed, forget the user; what it cost and whether anything of theirs is left."""
    await seed_others(storage, others)
    app = application(storage)
    texts = [f"private words {n}" for n in range(SESSIONS)]
    for n, text in enumerate(texts):
        await app.process(activity("target-user", f"tc-{n}", text))
    scans = await scan_steps(storage)
    started = time.perf_counter()
    report = await forget_user(storage, CHANNEL, "target-user")
    seconds = time.perf_counter() - started
    scans = await scan_steps(storage) - scans
    left = await leftovers(storage, "target-user", texts)
    return Forgot(report.documents, report.listed, report.read, scans, seconds, left)


@dataclass
class Forgot:
    own: int
    listed: int
    read: int
    scans: int
    """`SCAN` steps the Redis server ran (each walks up to 1,000 keys of the whole keyspace)."""
    seconds: float
    left: bool


async def scan_steps(storage: Storage) -> int:
    """How many `SCAN` commands the Redis server behind `storage` has run (0 elsewhere)."""
    if not isinstance(storage, RedisStorage):
        return 0
    stats = await storage.client.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


def stores(redis_url: str, folder: str) -> dict[str, Callable[[], Storage]]:
    """Each row's store, fresh: on Redis a new namespace, with today's write groups (a user's
    records in one group, listed from its index) and with 0.1.0's (listed by `SCAN`)."""

    def redis(groups: WriteGroup) -> Callable[[], Storage]:
        return lambda: RedisStorage.from_url(
            redis_url, namespace=f"bench-{uuid.uuid4().hex[:8]}", write_group=groups
        )

    return {  # each with the key scheme's write groups, as `open_storage` gives them
        "memory": lambda: MemoryStorage(write_group=write_group),
        "file": lambda: FileStorage(Path(tempfile.mkdtemp(dir=folder)), write_group=write_group),
        "redis": redis(write_group),
        "redis 0.1.0 groups": redis(earlier_write_group),
    }


async def forget_table(redis_url: str) -> None:
    print("forget one user with 10 sessions")
    print(f"{'store':<20}{'others':>8}{'own docs':>10}{'listed':>8}{'read':>6}{'x own':>7}"
          f"{'x 2,000':>9}{'SCAN steps':>12}{'ms':>8}{'ms x 2,000':>12}  left after")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        for name, opened in stores(redis_url, folder).items():
            base: Forgot | None = None
            for others in SIZES:
                async with opened() as storage:
                    row = await forget_row(storage, others)
                    if isinstance(storage, RedisStorage):
                        await forget_namespace(storage)
                work = row.listed + row.read
                base = base or row
                found = "user id or text found" if row.left else "nothing"
                print(f"{name:<20}{others:>8,}{row.own:>10}{row.listed:>8}{row.read:>6}"
                      f"{work / row.own:>7.2f}{work / (base.listed + base.read):>9.2f}"
                      f"{row.scans:>12}{row.seconds * 1000:>8.1f}"
                      f"{row.seconds / base.seconds:>12.2f}  {found}")  # fmt: skip


async def forget_namespace(storage: RedisStorage) -> None:
    """Delete every Redis key of the storage's namespace."""
    async for redis_key in storage.client.scan_iter(match=f"{storage.layout.prefix}*", count=1000):
        await storage.client.unlink(redis_key)


class CountingStorage(Storage):
    """A store that keeps nothing in this process: it takes every create through the storage
    layer (key checks, encoding, the size guard, write groups) and counts it. An import into
    it shows the importer's memory: into MemoryStorage the documents, the growth of its
    tables and its per-key caches would be measured with it."""

    atomic_batches = True

    def __init__(self) -> None:
        super().__init__()
        self.documents = 0

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        return {}

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        for write in writes:
            self.documents += 1
            outcomes[write.key] = str(self.documents)

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        return None

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        return  # it holds no key
        yield prefix


async def fill(storage: Storage, documents: int, prefix: str = "doc") -> None:
    """`documents` documents, every other one with a TTL."""
    for start in range(0, documents, AT_ONCE):
        batch = range(start, min(documents, start + AT_ONCE))
        writes = [
            {f"{prefix}/{i:07d}": StoreItem({"n": i, "text": f"doc {i}"}, ttl=ttl)}
            for i, ttl in ((i, 3600 if i % 2 else None) for i in batch)
        ]
        await asyncio.gather(*(storage.write(w) for w in writes))


async def exported(documents: int, path: Path, prefix: str = "doc") -> tuple[float, float]:
    """Export `documents` documents of a MemoryStorage to `path`: (seconds, tracemalloc's
    peak in MB; the source's documents were stored before tracing began)."""
    source = MemoryStorage()
    await fill(source, documents, prefix)
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    with open(path, "wb") as out:
        await export_store(source, out)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak / 1e6


async def import_peak(path: Path, documents: int, warm: Path) -> float:
    """tracemalloc's peak (MB) while importing `path` into a `CountingStorage`, traced since
    before an import of `warm`: that import took the storage layer's caches of keys (at most
    `KEYS_REMEMBERED` keys each, emptied or evicted when full) through several rounds, so every
    size meets them at their largest and the peak compares what the import holds beside them."""
    target = CountingStorage()
    tracemalloc.start()
    await import_store(target, warm)
    gc.collect()
    tracemalloc.reset_peak()
    report = await import_store(target, path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert report.written == documents
    return peak / 1e6


async def backup_row(documents: int, folder: Path) -> tuple[float, float, float, float]:
    """(export seconds, export peak MB, import seconds into MemoryStorage, import peak MB)."""
    path, warm = folder / f"backup-{documents}.jsonl", folder / "warm.jsonl"
    if not warm.exists():
        await exported(WARM_UP, warm, "warm")
    exporting, export_peak = await exported(documents, path)
    started = time.perf_counter()
    report = await import_store(MemoryStorage(), path)
    importing = time.perf_counter() - started
    assert report.written == documents
    return exporting, export_peak, importing, await import_peak(path, documents, warm)


async def backup_table() -> None:
    print("\nexport (MemoryStorage) / import (tracemalloc peak of the importer)")
    print(f"{'documents':>10}{'export s':>10}{'peak MB':>9}{'import s':>10}{'peak MB':>9}")
    peaks = []
    with tempfile.TemporaryDirectory() as folder:
        for documents in BACKUP_SIZES:
            exporting, export_peak, importing, import_mb = await backup_row(documents, Path(folder))
            peaks.append((export_peak, import_mb))
            print(f"{documents:>10,}{exporting:>10.2f}{export_peak:>9.2f}{importing:>10.2f}"
                  f"{import_mb:>9.3f}")  # fmt: skip
    for (e1, i1), (e2, i2), (small, large) in zip(
        peaks, peaks[1:], zip(BACKUP_SIZES, BACKUP_SIZES[1:], strict=False), strict=False
    ):
        print(f"peak at {large:,} over {small:,}: export {e2 / e1:.2f}x, "
              f"import {i2 / i1:.2f}x (target <= 1.5x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    with redis_server(args.redis_url) as redis_url:
        asyncio.run(forget_table(redis_url))
    asyncio.run(backup_table())


if __name__ == "__main__":
    main()
