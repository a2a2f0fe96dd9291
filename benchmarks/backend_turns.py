"""Our full turn next to its floor on each backend that does I/O: files and Redis.

The turn is `turns.py`'s: a message, the handler bumps a counter in conversation state (or
only reads it, unchanged) and sends a reply. Activities carry a fresh id per turn ("ids",
as real channels send them: our turn keeps its delivery evidence), or none ("no ids").
Each floor does that turn's storage work directly, in the minimal design, and nothing
else (it builds the reply too). With an id the floor checks the documents it read for the
activity's evidence and writes the evidence inside the conversation document (so an
unchanged turn with an id writes that one document), keeping per entry what ours keeps
(`_support.keep_evidence`: digest, time, sealed reply texts; our bound):

- file: read the turn's four files (user, conversation, session, app; only the
  conversation exists), `orjson.loads` it, edit, `orjson.dumps`; if the bytes changed,
  write a temp file, fsync, rename over the document, fsync the directory.
- Redis: one `MGET` of the four keys; if the bytes changed, one conditional Lua script
  (compare the stored version, set the new value). The floor sends through our storage's
  own redis-py client, so both sides have the same pool, timeouts and retries.

Rows are interleaved per round (wall-clock time); a share is the median of the rounds' own
ours/floor ratios. For Redis it also prints the server's time in commands per turn, each
side's (INFO commandstats before and after each measurement: every client's commands count, so
on a server given with `--redis-url` nothing else should run). Blob and Cosmos DB have their
own floors in `blob.py` and `cosmos.py`.
Targets (issue 23): the file changed turn with ids >= 50 % of its floor's turns/s; a Redis
turn >= 80 % of its floor's (the other file rows are shown against the same 50 %).

Run: .venv/bin/python benchmarks/backend_turns.py [--rounds 5] [--redis-url URL]
Without `--redis-url` (or `$AGENT_STATE_REDIS_URL`) it starts a private `redis-server` on a
free port and stops it by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from _support import keep_evidence, message, redis_server, unapplied, wire_of
from redis.asyncio import Redis

from agent_state import (
    Activity,
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
    server: Redis | None = None
    """The Redis both sides use (None for files): its time in commands is counted per turn."""
    ours_rates: list[float] = field(default_factory=list)
    floor_rates: list[float] = field(default_factory=list)
    server_us: dict[str, list[float]] = field(default_factory=lambda: {"ours": [], "floor": []})
    """Per side and round, the server's microseconds in commands per turn."""

    def of_floor(self) -> float:
        """The median over rounds of our turns/s over the floor's in the same round."""
        pairs = zip(self.ours_rates, self.floor_rates, strict=True)
        return statistics.median(ours / floor for ours, floor in pairs)


ACTIVITIES = [message(i) for i in range(POOL)]


def incoming(i: int, ids: bool) -> Activity:
    """Turn `i`'s activity, with a fresh id (`a{i}`) when `ids`: each `i` is used once."""
    activity = ACTIVITIES[i % POOL]
    return activity.model_copy(update={"id": f"a{i}"}) if ids else activity


def edit(documents: list[bytes | None], activity: Activity, changes: bool) -> tuple[bytes, int]:
    """A floor turn's work on the bytes it read (the conversation's second): the
    redelivery check, the edit, the evidence, the reply; the new bytes and the count."""
    decoded = [orjson.loads(data) for data in documents if data is not None]
    if activity.id is not None and not unapplied(activity.id, decoded):
        raise AssertionError("a fresh id was found applied")
    stored = documents[1]
    doc = orjson.loads(stored) if stored is not None else dict(SEED)
    count = doc["count"]
    if changes:
        doc["count"] = count = count + 1
    reply = activity.reply(f"count {count}")
    if activity.id is not None:
        keep_evidence(doc, activity.id, wire_of(activity), [reply.text or ""], time.time())
    return orjson.dumps(doc), count


def turn_keys(i: int) -> list[str]:
    """The keys a turn of conversation `i` reads, in the framework's order."""
    user, conversation = f"user-{i}", f"conv-{i}"
    return [
        user_key("bench", user),
        conversation_key("bench", conversation),
        session_key("bench", conversation, user),
        app_key("bench"),
    ]


async def ours(storage: Storage, changes: bool, ids: bool) -> Turn:
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        if changes:
            count += 1
            state["conversation:count"] = count
        await ctx.send(f"count {count}")

    async def turn(i: int) -> None:
        await app.process(incoming(i, ids))

    return turn


# --- files ----------------------------------------------------------------------------------


def file_floor(folder: str, changes: bool, ids: bool) -> Turn:
    paths = [[os.path.join(folder, f"{n}-{i}") for n in range(4)] for i in range(POOL)]
    for group in paths:
        with open(group[1], "wb") as file:
            file.write(orjson.dumps(SEED))

    async def turn(i: int) -> None:
        group = paths[i % POOL]
        found: list[bytes | None] = []
        for path in group:
            try:
                with open(path, "rb") as file:
                    found.append(file.read())
            except FileNotFoundError:
                found.append(None)
        data, _ = edit(found, incoming(i, ids), changes)
        if data != found[1]:
            temp = f"{group[1]}.tmp"
            with open(temp, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, group[1])
            directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)

    return turn


# --- Redis ----------------------------------------------------------------------------------

CAS = """
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 32) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1
"""


def redis_floor(raw: Redis, prefix: str, changes: bool, ids: bool) -> Turn:
    """The floor on `raw`: an `MGET`, and for changed bytes one conditional script."""
    keys = [[f"{prefix}:{n}:{i}" for n in range(4)] for i in range(POOL)]
    cas = raw.register_script(CAS)

    async def turn(i: int) -> None:
        group = keys[i % POOL]
        # our storage's client does not decode responses: every value is bytes or None
        values = cast(list[bytes | None], await raw.mget(group))
        stored = values[1]
        version, current = (stored[:32], stored[32:]) if stored else (b"", None)
        bodies = [value[32:] if value else None for value in values]
        data, _ = edit(bodies, incoming(i, ids), changes)
        if data != current:
            await cas(keys=[group[1]], args=[version, uuid.uuid4().hex.encode() + data])

    return turn


# --- driver ---------------------------------------------------------------------------------


async def measure(turn: Turn, seconds: float, start: int) -> tuple[float, int]:
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for i in range(start + done, start + done + 10):
            await turn(i)
        done += 10
    return done / elapsed, done


def run_on(redis_url: str | None, rounds: int, round_seconds: float) -> bool:
    """`run` on the Redis at `redis_url`, or on a private server when it is None."""
    with redis_server(redis_url) as url:
        return asyncio.run(run(url, rounds, round_seconds))


async def run(redis_url: str, rounds: int, round_seconds: float) -> bool:
    with tempfile.TemporaryDirectory(prefix="agent-state-bench-") as folder:
        return await run_in(folder, redis_url, rounds, round_seconds)


async def run_in(folder: str, redis_url: str, rounds: int, round_seconds: float) -> bool:
    """Measure every row with its files under `folder`, then print the table."""
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    stores: list[Storage] = []
    rows = []
    for ids in (True, False):
        for changes in (True, False):
            change = f"{'changed' if changes else 'unchanged'}, {'ids' if ids else 'no ids'}"
            name = change.replace(", ", "-").replace(" ", "")
            files = open_storage(f"file://{folder}/ours-{name}")
            redis = open_storage(redis_url, namespace=f"{namespace}-{name}")
            stores += [files, redis]
            floor_folder = os.path.join(folder, f"floor-{name}")
            os.mkdir(floor_folder)
            file_turns = await ours(files, changes, ids)
            rows.append(
                Row("file", change, file_turns, file_floor(floor_folder, changes, ids), 0.5)
            )
            client = redis.client  # type: ignore[attr-defined]
            same_client = redis_floor(client, f"{namespace}-floor-{name}", changes, ids)
            turns = await ours(redis, changes, ids)
            rows.append(Row("Redis", change, turns, same_client, 0.8, server=client))
    try:
        for row in rows:  # every document exists, connections and scripts are warm
            for i in range(POOL):
                await row.ours(i)
                await row.floor(i)
        # each side's turn numbers go on from the warm-up's and its own last round: fresh ids
        counts = {(id(row), side): POOL for row in rows for side in ("ours", "floor")}
        for number in range(rounds):
            for row in rows if number % 2 == 0 else reversed(rows):
                pair = [("ours", row.ours), ("floor", row.floor)]
                for side, turn in pair if number % 2 == 0 else reversed(pair):
                    before = await server_time(row.server)
                    rate, done = await measure(turn, round_seconds, counts[id(row), side])
                    (row.ours_rates if side == "ours" else row.floor_rates).append(rate)
                    counts[id(row), side] += done
                    if row.server is not None:
                        spent = await server_time(row.server) - before
                        row.server_us[side].append(spent / done)
    finally:
        client = stores[1].client  # type: ignore[attr-defined]
        async for key in client.scan_iter(match=f"{namespace}*"):  # ours and the floors'
            await client.unlink(key)
        for store in stores:
            await store.close()
    return report(rows, rounds, round_seconds)


async def server_time(server: Redis | None) -> int:
    """Microseconds the Redis server has spent in commands (INFO commandstats), its INFO
    calls left out; 0 without a server."""
    if server is None:
        return 0
    stats = await server.info("commandstats")
    return sum(int(entry["usec"]) for name, entry in stats.items() if name != "cmdstat_info")


def report(rows: list[Row], rounds: int, round_seconds: float) -> bool:
    """The table, a met / NOT met verdict per row; whether every row met its target."""
    print(
        f"\nagent-state AgentApplication turns vs their floors (the same turn's storage work"
        f" done directly, minimal design);\nmedians of {rounds} interleaved rounds of"
        f" {round_seconds} s; 'of floor': median of per-round ratios; 'server us': the Redis"
        " server's time\nin commands per turn (INFO commandstats), ours / the floor's"
    )
    header = (
        f"{'backend':<8}{'turn':<22}{'ours/s':>9}{'floor/s':>10}{'of floor':>10}"
        f"{'server us':>14}  target"
    )
    print(header)
    print("-" * len(header))
    all_met = True
    for row in rows:
        share = row.of_floor()
        met = share >= row.share
        all_met &= met
        server = ""
        if row.server is not None:
            mine, theirs = (statistics.median(row.server_us[side]) for side in ("ours", "floor"))
            server = f"{mine:.1f} / {theirs:.1f}"
        print(
            f"{row.backend:<8}{row.change:<22}{statistics.median(row.ours_rates):>9,.0f}"
            f"{statistics.median(row.floor_rates):>10,.0f}{share:>10.0%}{server:>14}"
            f"  >= {row.share:.0%}: {'met' if met else 'NOT met'}"
        )
    return all_met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    return 0 if run_on(args.redis_url, args.rounds, args.round_seconds) else 1


if __name__ == "__main__":
    sys.exit(main())
