"""Turns per second on Redis next to the floor measured in the same run: a raw GET + SET per turn.

Run from the repository root: `.venv/bin/python benchmarks/redis_turns.py [--url URL] [--turns N]`.
Without `--url` (or `$AGENT_STATE_REDIS_URL`) it starts a private `redis-server` on a free port
and stops it by its PID at the end. Targets: a changed turn reaches at least 50% of the floor's
turns per second in exactly 2 round trips; an unchanged turn takes 1.
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
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from _support import free_port, server
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from agent_state import AgentApplication, conversation_key, session_key, user_key
from agent_state.backends import StoreItem
from agent_state.backends._envelope import dump_data, wrap
from agent_state.backends._redis import RedisStorage

FLOOR_SHARE = 0.5
CONVERSATIONS = 100
CHANNEL = "bench"
NOTES = "lorem ipsum " * 60  # about 0.7 KB of state per bucket

Turn = Callable[[int], Awaitable[None]]


class CountingConnection(Connection):
    """A redis-py connection that counts the requests it writes (a pipeline is one)."""

    sent = 0

    async def send_packed_command(self, command, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


@dataclass
class Row:
    """One measured kind of turn and what it must reach."""

    name: str
    turn: Turn
    round_trips: int
    is_floor: bool = False
    turns_per_second: float = 0.0
    measured_trips: float = 0.0


def ids(i: int) -> tuple[str, str]:
    return f"user-{i % CONVERSATIONS}", f"conversation-{i % CONVERSATIONS}"


def storage_turns(storage: RedisStorage) -> tuple[Turn, Turn]:
    """A turn as the storage sees it: read user, conversation and session; write the session."""
    turn_keys = []
    for i in range(CONVERSATIONS):
        user, conversation = ids(i)
        turn_keys.append(
            [
                user_key(CHANNEL, user),
                conversation_key(CHANNEL, conversation),
                session_key(CHANNEL, conversation, user),
            ]
        )

    async def changed(i: int) -> None:
        keys = turn_keys[i % CONVERSATIONS]
        current = (await storage.read(keys)).get(keys[2])
        value = {"count": current.value["count"] + 1 if current else 0, "notes": NOTES}
        await storage.write({keys[2]: StoreItem(value, current.etag if current else None)})

    async def unchanged(i: int) -> None:
        await storage.read(turn_keys[i % CONVERSATIONS])

    return changed, unchanged


def app_turns(storage: RedisStorage) -> tuple[Turn, Turn]:
    """A full `AgentApplication` turn: load every bucket, run the handler, save what changed."""
    counting, reading = (AgentApplication(storage, app_name="bench") for _ in range(2))

    @counting.message()
    async def count(ctx, state) -> None:
        state["count"] = state.get("count", 0) + 1
        state["notes"] = NOTES

    @reading.message()
    async def read(ctx, state) -> None:
        state.get("count")

    def activity(i: int) -> dict:
        user, conversation = ids(i)
        return {
            "type": "message",
            "id": uuid.uuid4().hex,
            "channelId": CHANNEL,
            "text": "hi",
            "from": {"id": user},
            "conversation": {"id": conversation},
        }

    async def changed(i: int) -> None:
        await counting.process(activity(i))

    async def unchanged(i: int) -> None:
        await reading.process(activity(i))

    return changed, unchanged


def floor_turn(raw: Redis) -> Turn:
    """The floor: one raw GET and one SET of a session-sized envelope per turn."""
    payload = wrap("k", dump_data("k", {"count": 1, "notes": NOTES}))

    async def turn(i: int) -> None:
        key = f"floor:{i % CONVERSATIONS}"
        await raw.get(key)
        await raw.set(key, payload)

    return turn


async def measure(row: Row, turns: int) -> tuple[float, float]:
    CountingConnection.sent = 0
    start = time.perf_counter()
    for i in range(turns):
        await row.turn(i)
    elapsed = time.perf_counter() - start
    return turns / elapsed, CountingConnection.sent / turns


async def run(url: str, turns: int, rounds: int) -> bool:
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    raw = Redis.from_url(url, connection_class=CountingConnection)
    storage = RedisStorage.from_url(
        url, namespace=namespace, client_options={"connection_class": CountingConnection}
    )
    store_changed, store_unchanged = storage_turns(storage)
    app_changed, app_unchanged = app_turns(storage)
    rows = [
        Row("raw floor: GET + SET", floor_turn(raw), 2, is_floor=True),
        Row("storage turn, changed (read 3, write 1)", store_changed, 2),
        Row("storage turn, unchanged (read 3)", store_unchanged, 1),
        Row("AgentApplication turn, changed", app_changed, 2),
        Row("AgentApplication turn, unchanged", app_unchanged, 1),
    ]
    try:
        for row in rows:  # warm up: connections, scripts, and every document exists
            for i in range(2 * CONVERSATIONS):
                await row.turn(i)
        samples: dict[str, list[tuple[float, float]]] = {row.name: [] for row in rows}
        for _ in range(rounds):  # interleaved, so drift hits every row alike
            for row in rows:
                samples[row.name].append(await measure(row, turns))
        for row in rows:
            row.turns_per_second = statistics.median(s[0] for s in samples[row.name])
            row.measured_trips = max(s[1] for s in samples[row.name])
    finally:
        async for key in raw.scan_iter(match="floor:*"):
            await raw.unlink(key)
        async for key in raw.scan_iter(match=f"{namespace}:*"):
            await raw.unlink(key)
        await raw.aclose()
        await storage.close()
    return report(url, turns, rounds, rows)


def report(url: str, turns: int, rounds: int, rows: list[Row]) -> bool:
    floor = next(row for row in rows if row.is_floor).turns_per_second
    print(f"Redis at {url}: {turns} sequential turns per round, median of {rounds} rounds\n")
    print(f"{'turn':<42}{'turns/s':>10}{'% of floor':>12}{'round trips':>13}  target")
    all_met = True
    for row in rows:
        share = row.turns_per_second / floor
        met = row.measured_trips == row.round_trips and (
            row.is_floor or row.round_trips == 1 or share >= FLOOR_SHARE
        )
        all_met &= met
        target = f"{row.round_trips} trip{'s' * (row.round_trips > 1)}"
        if not row.is_floor and row.round_trips == 2:
            target += f", >= {FLOOR_SHARE:.0%}"
        print(
            f"{row.name:<42}{row.turns_per_second:>10,.0f}{share:>12.0%}"
            f"{row.measured_trips:>13.2f}  {target}: {'ok' if met else 'MISSED'}"
        )
    return all_met


@contextmanager
def private_server() -> Iterator[str]:
    """A throwaway redis-server on a free loopback port, stopped by its PID."""
    port = free_port()
    with tempfile.TemporaryDirectory() as directory:
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        command += ["--appendonly", "no", "--dir", directory]
        with server(command, port, "redis-server"):
            yield f"redis://127.0.0.1:{port}/0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("AGENT_STATE_REDIS_URL"),
        help="a standalone Redis (default: $AGENT_STATE_REDIS_URL, else a private redis-server)",
    )
    parser.add_argument("--turns", type=int, default=2000, help="turns per round and row")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.url:
        return 0 if asyncio.run(run(args.url, args.turns, args.rounds)) else 1
    with private_server() as url:
        return 0 if asyncio.run(run(url, args.turns, args.rounds)) else 1


if __name__ == "__main__":
    sys.exit(main())
