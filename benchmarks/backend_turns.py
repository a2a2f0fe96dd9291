"""Our full turn next to its floor on each backend that does I/O: files and Redis.

The turn is `turns.py`'s: a message, the handler bumps a counter in conversation state (or
only reads it, unchanged) and sends a reply; activities carry no id. Each floor does that
turn's storage work directly and nothing else (it builds the reply too):

- file, changed: read the turn's four files (user, conversation, session, app; only the
  conversation exists), `orjson.loads` it, bump, `orjson.dumps`, write a temp file, fsync,
  rename over the document, fsync the directory. Unchanged: the four reads and the decode.
- Redis, changed: one `MGET` of the four keys, then one conditional Lua script (compare the
  stored version, set the new value). Unchanged: the `MGET` alone. The floor sends through
  our storage's own redis-py client, so both sides have the same pool, timeouts and retries.

Rows are interleaved per round (wall-clock time, medians). Blob and Cosmos DB have their
own floors in `blob.py` and `cosmos.py`. Targets (issue 16): a file turn within 2x of its
floor's time (>= 50% of its turns/s); a Redis turn >= 80% of its floor's turns/s.

Run: .venv/bin/python benchmarks/backend_turns.py [--rounds 5] [--redis-url URL]
Without `--redis-url` (or `$AGENT_STATE_REDIS_URL`) it starts a private `redis-server` on a
free port and stops it by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from _support import free_port, message, server
from redis.asyncio import Redis

from agent_state import (
    AgentApplication,
    TurnContext,
    TurnState,
    app_key,
    conversation_key,
    open_storage,
    session_key,
    user_key,
)
from agent_state.backends import Storage

POOL = 50
SEED: dict[str, Any] = {"count": 0, "topic": "benchmarks"}
Turn = Callable[[int], Awaitable[None]]


@dataclass
class Row:
    backend: str
    change: str
    ours: Turn
    floor: Turn
    share: float
    ours_rates: list[float] = field(default_factory=list)
    floor_rates: list[float] = field(default_factory=list)


ACTIVITIES = [message(i) for i in range(POOL)]


def turn_keys(i: int) -> list[str]:
    """The keys a turn of conversation `i` reads, in the framework's order."""
    user, conversation = f"user-{i}", f"conv-{i}"
    return [
        user_key("bench", user),
        conversation_key("bench", conversation),
        session_key("bench", conversation, user),
        app_key("bench"),
    ]


async def ours(storage: Storage, changes: bool) -> Turn:
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        if changes:
            count += 1
            state["conversation:count"] = count
        await ctx.send(f"count {count}")

    async def turn(i: int) -> None:
        await app.process(ACTIVITIES[i % POOL])

    return turn


# --- files ----------------------------------------------------------------------------------


def file_floor(folder: str, changes: bool) -> Turn:
    paths = [[os.path.join(folder, f"{n}-{i}") for n in range(4)] for i in range(POOL)]
    for group in paths:
        with open(group[1], "wb") as file:
            file.write(orjson.dumps(SEED))

    async def turn(i: int) -> None:
        group = paths[i % POOL]
        found = {}
        for path in group:
            try:
                with open(path, "rb") as file:
                    found[path] = file.read()
            except FileNotFoundError:
                pass
        doc = orjson.loads(found[group[1]])
        count = doc["count"]
        if changes:
            doc["count"] = count = count + 1
            temp = f"{group[1]}.tmp"
            with open(temp, "wb") as file:
                file.write(orjson.dumps(doc))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, group[1])
            directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        ACTIVITIES[i % POOL].reply(f"count {count}")

    return turn


# --- Redis ----------------------------------------------------------------------------------

CAS = """
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


def redis_floor(raw: Redis, prefix: str, changes: bool) -> Turn:
    """The floor on `raw`: an `MGET`, and for a change one conditional script."""
    keys = [[f"{prefix}:{n}:{i}" for n in range(4)] for i in range(POOL)]
    cas = raw.register_script(CAS)

    async def turn(i: int) -> None:
        group = keys[i % POOL]
        values = await raw.mget(group)
        stored = values[1]
        version, doc = (stored[:32], orjson.loads(stored[32:])) if stored else (b"", dict(SEED))
        count = doc["count"]
        if changes:
            doc["count"] = count = count + 1
            value = uuid.uuid4().hex.encode() + orjson.dumps(doc)
            await cas(keys=[group[1]], args=[version, value])
        ACTIVITIES[i % POOL].reply(f"count {count}")

    return turn


@contextmanager
def private_redis() -> Iterator[str]:
    """A throwaway redis-server on a free loopback port, stopped by its PID."""
    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        command += ["--appendonly", "no", "--dir", directory]
        with server(command, port, "redis-server"):
            yield f"redis://127.0.0.1:{port}/0"


# --- driver ---------------------------------------------------------------------------------


async def measure(turn: Turn, seconds: float, start: int) -> tuple[float, int]:
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for i in range(start + done, start + done + 10):
            await turn(i)
        done += 10
    return done / elapsed, done


def run_on(redis_url: str | None, rounds: int, round_seconds: float) -> None:
    """`run` on the Redis at `redis_url`, or on a private server when it is None."""
    if redis_url:
        asyncio.run(run(redis_url, rounds, round_seconds))
        return
    with private_redis() as url:
        asyncio.run(run(url, rounds, round_seconds))


async def run(redis_url: str, rounds: int, round_seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="agent-state-bench-") as folder:
        await run_in(folder, redis_url, rounds, round_seconds)


async def run_in(folder: str, redis_url: str, rounds: int, round_seconds: float) -> None:
    """Measure every row with its files under `folder`, then print the table."""
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    stores: list[Storage] = []
    rows = []
    for changes in (True, False):
        change = "changed" if changes else "unchanged"
        files = open_storage(f"file://{folder}/ours-{change}")
        redis = open_storage(redis_url, namespace=f"{namespace}-{change}")
        stores += [files, redis]
        floor_folder = os.path.join(folder, f"floor-{change}")
        os.mkdir(floor_folder)
        rows.append(
            Row("file", change, await ours(files, changes), file_floor(floor_folder, changes), 0.5)
        )
        prefix = f"{namespace}-floor-{change}"
        same_client = redis_floor(redis.client, prefix, changes)  # type: ignore[attr-defined]
        rows.append(Row("Redis", change, await ours(redis, changes), same_client, 0.8))
    try:
        for row in rows:  # every document exists, connections and scripts are warm
            for i in range(POOL):
                await row.ours(i)
                await row.floor(i)
        counts = {id(row): 0 for row in rows}
        for number in range(rounds):
            for row in rows if number % 2 == 0 else reversed(rows):
                pair = [("ours", row.ours), ("floor", row.floor)]
                for side, turn in pair if number % 2 == 0 else reversed(pair):
                    rate, done = await measure(turn, round_seconds, counts[id(row)])
                    (row.ours_rates if side == "ours" else row.floor_rates).append(rate)
                counts[id(row)] += done
    finally:
        client = stores[1].client  # type: ignore[attr-defined]
        async for key in client.scan_iter(match=f"{namespace}*"):  # ours and the floors'
            await client.unlink(key)
        for store in stores:
            await store.close()
    report(rows, rounds, round_seconds)


def report(rows: list[Row], rounds: int, round_seconds: float) -> None:
    print(
        f"\nTurns next to their floors; medians of {rounds} interleaved rounds of {round_seconds} s"
    )
    header = f"{'backend':<8}{'turn':<11}{'ours/s':>9}{'floor/s':>10}{'of floor':>10}  target"
    print(header)
    print("-" * len(header))
    for row in rows:
        ours_rate = statistics.median(row.ours_rates)
        floor_rate = statistics.median(row.floor_rates)
        share = ours_rate / floor_rate
        verdict = "met" if share >= row.share else "missed"
        print(
            f"{row.backend:<8}{row.change:<11}{ours_rate:>9,.0f}{floor_rate:>10,.0f}"
            f"{share:>10.0%}  >= {row.share:.0%}: {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.4)
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    run_on(args.redis_url, args.rounds, args.round_seconds)


if __name__ == "__main__":
    main()
