"""A user's data and the whole store: forget one user among many, export and import in
constant memory.

Forget: one user with 10 sessions (each made by a real turn: user, conversation and session
buckets, history, the delivery record of the reply, the user's index entry) among 2,000 and
among 20,000 other users (each seeded through the storage API: user bucket, session bucket,
index entry), on MemoryStorage and FileStorage. Printed: the user's own documents, keys
listed and read by `forget_user`, that count over the user's documents (target <= 3x), the
ratio between the two sizes (target <= 1.2x), and whether a raw scan of the store after the
forget finds the user's id or any text they sent (target: no).

Backup: `export_store` of 10,000 and 100,000 documents on MemoryStorage to a file, and
`import_store` of that file into a fresh MemoryStorage; tracemalloc's peak during each (for
the import, above what the target store holds afterwards: the documents themselves are the
store's). Target: the peak at 100,000 within 1.5x of the peak at 10,000 (200,000 shows
the trend). The export's peak holds the store's set of validated keys (`backends/_keys.py`,
at most 8,192 keys, emptied when full), the same at every size.

Run: .venv/bin/python benchmarks/lifecycle.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson

from agent_state import (
    AgentApplication,
    TurnContext,
    TurnState,
    export_store,
    forget_user,
    import_store,
    session_key,
    user_key,
)
from agent_state.backends import FileStorage, MemoryStorage, Storage, StoreItem

CHANNEL = "t"

SESSIONS = 10
SIZES = (2_000, 20_000)
BACKUP_SIZES = (10_000, 100_000, 200_000)
AT_ONCE = 200


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


async def forget_row(storage: Storage, others: int) -> tuple[int, int, int, bool]:
    """Seed, forget the user; (their documents, keys listed, keys read, anything left)."""
    await seed_others(storage, others)
    app = application(storage)
    texts = [f"private words {n}" for n in range(SESSIONS)]
    for n, text in enumerate(texts):
        await app.process(activity("target-user", f"tc-{n}", text))
    report = await forget_user(storage, CHANNEL, "target-user")
    left = await leftovers(storage, "target-user", texts)
    return report.documents, report.listed, report.read, left


async def forget_table() -> None:
    print("forget one user with 10 sessions")
    print(f"{'store':<8}{'others':>8}{'own docs':>10}{'listed':>8}{'read':>6}"
          f"{'x own':>7}{'x 2,000':>9}  left after")  # fmt: skip
    for name in ("memory", "file"):
        base = 0
        for others in SIZES:
            with tempfile.TemporaryDirectory() as folder:
                storage: Storage = (
                    MemoryStorage() if name == "memory" else FileStorage(Path(folder) / "s")
                )
                async with storage:
                    own, listed, read, left = await forget_row(storage, others)
            work = listed + read
            base = base or work
            found = "user id or text found" if left else "nothing"
            print(f"{name:<8}{others:>8,}{own:>10}{listed:>8}{read:>6}{work / own:>7.2f}"
                  f"{work / base:>9.2f}  {found}")  # fmt: skip


async def backup_row(documents: int, folder: Path) -> tuple[float, float, float, float]:
    """(export seconds, export peak MB, import seconds, import peak MB above the store)."""
    source = MemoryStorage()
    for start in range(0, documents, AT_ONCE):
        batch = range(start, min(documents, start + AT_ONCE))
        writes = [
            {f"doc/{i:07d}": StoreItem({"n": i, "text": f"doc {i}"}, ttl=3600 if i % 2 else None)}
            for i in batch
        ]
        await asyncio.gather(*(source.write(w) for w in writes))
    path = folder / f"backup-{documents}.jsonl"
    tracemalloc.start()
    started = time.perf_counter()
    with open(path, "wb") as out:
        await export_store(source, out)
    exported = time.perf_counter() - started
    export_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    target = MemoryStorage()
    started = time.perf_counter()
    report = await import_store(target, path)
    imported = time.perf_counter() - started
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.written == documents
    return exported, export_peak / 1e6, imported, (peak - held) / 1e6


async def backup_table() -> None:
    print("\nexport / import (MemoryStorage, tracemalloc peak)")
    print(f"{'documents':>10}{'export s':>10}{'peak MB':>9}{'import s':>10}{'peak MB':>9}")
    peaks = []
    with tempfile.TemporaryDirectory() as folder:
        for documents in BACKUP_SIZES:
            exported, export_peak, imported, import_peak = await backup_row(documents, Path(folder))
            peaks.append((export_peak, import_peak))
            print(f"{documents:>10,}{exported:>10.2f}{export_peak:>9.2f}{imported:>10.2f}"
                  f"{import_peak:>9.2f}")  # fmt: skip
    for (e1, i1), (e2, i2), (small, large) in zip(
        peaks, peaks[1:], zip(BACKUP_SIZES, BACKUP_SIZES[1:], strict=False), strict=False
    ):
        print(f"peak at {large:,} over {small:,}: export {e2 / e1:.2f}x, "
              f"import {i2 / i1:.2f}x (target <= 1.5x)")  # fmt: skip


async def main() -> None:
    await forget_table()
    await backup_table()


if __name__ == "__main__":
    asyncio.run(main())
