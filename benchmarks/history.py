"""Per-turn cost of keeping conversation history, at 10, 1,000 and 10,000 messages held.

A turn appends one exchange (a user and an assistant message) and reads the last 20:
- agent-state: `state.history` in `open_turn`, on MemoryStorage, FileStorage (a temp dir)
  and Redis (`--redis-url`, default $AGENT_STATE_REDIS_URL, else a private redis-server);
- Google ADK: `get_session`, two `append_event`s, the session's last 20 events, on
  `InMemorySessionService`, `SqliteSessionService` and `DatabaseSessionService` (SQLite;
  skipped without SQLAlchemy), loading the whole session (the Runner's default) and, for
  the first two, with `num_recent_events=20`;
- M365 Agents SDK: the whole history as a list in `ConversationState` on the SDK's
  MemoryStorage (load, append two, save, take the last 20).
Histories are seeded untimed (agent-state by 500-message appends, FileStorage with fsync
off and then os.sync(); ADK's in-memory and SQLite stores and M365's directly). A seeded
history takes at most N/20 timed turns (one at N=10): it grows by at most 10% (20% at
N=10), and cells seed fresh ones as needed. Rounds are interleaved (every cell once per
round, rotating order); each figure is the median of the rounds' microseconds per turn.

Run: .venv/bin/python benchmarks/history.py [--rounds 5] [--turns 100] [--round-seconds 0.3]
     [--redis-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.metadata
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from _support import StubAdapter, free_port, ms_get, ms_message, ms_set, server
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState

from agent_state import TurnIds, open_storage, open_turn, write_group
from agent_state.backends import RedisStorage, Storage

SIZES = (10, 1_000, 10_000)
TARGET = 1.3
LAST, BATCH = 20, 500
APP, USER = "bench", "u"
TEXT = "a message of about a hundred characters, like a short chat turn between a user and a bot."


def message(ident: str, i: int) -> dict[str, str]:
    return {"id": ident, "role": "assistant" if i % 2 else "user", "content": TEXT}


def adk_event(i: int, timestamp: float | None = None) -> Event:
    role = "model" if i % 2 else "user"
    content = types.Content(role=role, parts=[types.Part(text=TEXT)])
    extra = {} if timestamp is None else {"timestamp": timestamp}
    return Event(invocation_id=f"inv-{i // 2}", author=role, content=content, **extra)


INSERT_EVENT = (
    "INSERT INTO events (app_name, user_id, session_id, id, invocation_id, timestamp, event_data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def sqlite_row(e: Event) -> tuple[str, str, float, str]:
    """An event as `SqliteSessionService.append_event` stores it."""
    return e.id, e.invocation_id, e.timestamp, e.model_dump_json(exclude_none=True)


class System:
    """One row: how it seeds a history of `n` messages and runs a turn on it."""

    name = ""
    ours = False

    async def seed(self, conv: str, n: int) -> None:
        raise NotImplementedError

    async def turn(self, conv: str, k: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class Ours(System):
    ours = True

    def __init__(self, name: str, storage: Storage, no_fsync: bool = False) -> None:
        self.name, self.storage, self.no_fsync = name, storage, no_fsync
        self.ids: dict[str, TurnIds] = {}

    async def seed(self, conv: str, n: int) -> None:
        ids = TurnIds(channel_id=APP, user_id=USER, conversation_id=conv, app_name=APP)
        self.ids[conv] = ids
        patch = mock.patch("os.fsync", lambda fd: None) if self.no_fsync else None
        with patch or contextlib.nullcontext():
            for start in range(0, n, BATCH):
                async with open_turn(self.storage, ids) as state:
                    batch = range(start, min(n, start + BATCH))
                    await state.history.append(*(message(f"s{i}", i) for i in batch))
        if self.no_fsync:
            os.sync()  # flush what seeding wrote now, not in the first timed turn's fsync

    async def turn(self, conv: str, k: int) -> None:
        async with open_turn(self.storage, self.ids[conv]) as state:
            await state.history.append(message(f"t{k}u", 0), message(f"t{k}a", 1))
            last = await state.history.last(LAST)
        assert len(last) <= LAST and last[-1]["id"] == f"t{k}a"

    async def close(self) -> None:
        if isinstance(self.storage, RedisStorage):  # an outside server: leave nothing behind
            async for key in self.storage.client.scan_iter(match=f"{self.storage.layout.prefix}*"):
                await self.storage.client.unlink(key)
        await self.storage.close()


class Adk(System):
    """A session service; seeded straight into its store where we know it (else by appends)."""

    def __init__(self, name: str, service: BaseSessionService, recent: bool, db: str = "") -> None:
        self.name, self.service, self.db = name, service, db
        self.config = GetSessionConfig(num_recent_events=LAST) if recent else None
        self.events: dict[int, list[Event]] = {}

    def seeded(self, n: int) -> list[Event]:
        if n not in self.events:  # built once per size, shared by the sessions seeded
            base = time.time() - 1
            self.events[n] = [adk_event(i, base + i * 1e-6) for i in range(n)]
        return self.events[n]

    async def seed(self, conv: str, n: int) -> None:
        events, service = self.seeded(n), self.service
        session = await service.create_session(app_name=APP, user_id=USER, session_id=conv)
        if isinstance(service, InMemorySessionService):
            service.sessions[APP][USER][conv].events.extend(events)
        elif isinstance(service, SqliteSessionService):
            rows = [(APP, USER, conv, *sqlite_row(e)) for e in events]
            with contextlib.closing(sqlite3.connect(self.db)) as db, db:
                db.executemany(INSERT_EVENT, rows)
        else:
            for event in events:
                await service.append_event(session, event.model_copy())

    async def turn(self, conv: str, k: int) -> None:
        session = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=conv, config=self.config
        )
        assert session is not None
        await self.service.append_event(session, adk_event(0))
        reply = await self.service.append_event(session, adk_event(1))
        last = session.events[-LAST:]
        assert len(last) <= LAST and last[-1].id == reply.id


class M365List(System):
    name = "M365 SDK · history list in ConversationState"

    def __init__(self) -> None:
        self.storage, self.adapter = ms.MemoryStorage(), StubAdapter()
        self.activities: dict[str, ms_activity.Activity] = {}

    async def seed(self, conv: str, n: int) -> None:
        self.activities[conv] = activity = ms_message(APP, USER, conv)
        key = ms.ConversationState(self.storage).get_storage_key(
            ms.TurnContext(self.adapter, activity)
        )
        history = [message(f"s{i}", i) for i in range(n)]
        document: dict[str, Any] = {"history": history}  # the SDK annotates StoreItem values
        await self.storage.write({key: CachedAgentState(document)})

    async def turn(self, conv: str, k: int) -> None:
        ctx = ms.TurnContext(self.adapter, self.activities[conv])
        conversation = ms.ConversationState(self.storage)
        await conversation.load(ctx)
        history: list[dict[str, Any]] = ms_get(conversation, "history", [])
        history += [message(f"t{k}u", 0), message(f"t{k}a", 1)]
        ms_set(conversation, "history", history)
        await conversation.save(ctx)
        last = history[-LAST:]
        assert len(last) <= LAST and last[-1]["id"] == f"t{k}a"


@dataclass
class Cell:
    """One system at one history size: its seeded histories and its rounds' costs."""

    system: System
    size: int
    slots: list[str] = field(default_factory=list)  # a history per timed turn it may take
    used: int = 0
    costs: list[float] = field(default_factory=list)

    async def run(self, turns: int, budget: float) -> float:
        """Microseconds per turn over up to `turns` turns or `budget` seconds."""
        while len(self.slots) - self.used < turns:  # seed untimed, before the clock starts
            conv = f"n{self.size}-{uuid.uuid4().hex[:8]}"
            await self.system.seed(conv, self.size)
            self.slots += [conv] * max(1, self.size // 20)
        done, start = 0, time.perf_counter()
        for conv in self.slots[self.used : self.used + turns]:
            await self.system.turn(conv, self.used + done)
            done += 1
            if time.perf_counter() - start >= budget:
                break
        elapsed = time.perf_counter() - start
        self.used += done
        return elapsed / done * 1e6


async def make_systems(tmp: str, redis_url: str | None, redis_label: str) -> list[System]:
    systems: list[System] = [
        Ours("agent-state · MemoryStorage", open_storage("memory://")),
        Ours("agent-state · FileStorage (temp dir)", open_storage(f"file://{tmp}/files"), True),
    ]
    if redis_url:
        storage = RedisStorage.from_url(
            redis_url, namespace=f"bench-{uuid.uuid4().hex[:8]}", write_group=write_group
        )
        systems.append(Ours(f"agent-state · RedisStorage ({redis_label})", storage))
    for recent, suffix in ((False, ""), (True, ", last 20 only")):
        systems.append(
            Adk(f"ADK · InMemorySessionService{suffix}", InMemorySessionService(), recent)
        )
        db = f"{tmp}/adk-sqlite-{int(recent)}.db"
        systems.append(
            Adk(f"ADK · SqliteSessionService{suffix}", SqliteSessionService(db), recent, db)
        )
    try:
        from google.adk.sessions import DatabaseSessionService

        service = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{tmp}/adk-db.db")
        systems.append(Adk("ADK · DatabaseSessionService (SQLite)", service, False))
    except Exception as exc:  # e.g. SQLAlchemy not installed
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"skipped ADK DatabaseSessionService (sqlite+aiosqlite): {reason}")
    systems.append(M365List())
    return systems


async def bench(args: argparse.Namespace, redis_url: str | None, redis_label: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        systems = await make_systems(tmp, redis_url, redis_label)
        cells = [Cell(system, size) for system in systems for size in SIZES]
        try:
            for cell in cells:  # warm-up: connections, schemas, caches (not recorded)
                await cell.run(min(3, args.turns), args.round_seconds)
            for number in range(args.rounds):
                shift = number * len(cells) // args.rounds
                for cell in cells[shift:] + cells[:shift]:
                    cell.costs.append(await cell.run(args.turns, args.round_seconds))
        finally:
            for system in systems:
                await system.close()
    report(args, cells)


def report(args: argparse.Namespace, cells: list[Cell]) -> None:
    print(
        f"\nµs per turn (append a user + an assistant message, read the last 20), median of"
        f" {args.rounds} interleaved rounds of up to {args.turns} turns or"
        f" {args.round_seconds:g} s per cell\n"
    )
    sizes = "".join(f"{f'{n:,} msgs':>13}" for n in SIZES)
    print(f"{'system':<50}{sizes}{'10,000 / 10':>13}  target")
    for i in range(0, len(cells), len(SIZES)):
        row = cells[i : i + len(SIZES)]
        median = [statistics.median(cell.costs) for cell in row]
        ratio = median[-1] / median[0]
        costs = "".join(f"{m:>13,.0f}" for m in median)
        target = (
            f"<= {TARGET}x: {'ok' if ratio <= TARGET else 'MISSED'}" if row[0].system.ours else "-"
        )
        print(f"{row[0].system.name:<50}{costs}{ratio:>12.2f}x  {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--turns", type=int, default=100, help="turns per cell and round, at most")
    parser.add_argument(
        "--round-seconds", type=float, default=0.3, help="time per cell and round, at most"
    )
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("google-adk", "microsoft-agents-hosting-core")
    )
    print(
        f"{datetime.date.today()} · Python {platform.python_version()} · {os.cpu_count()} cores"
        f" · {versions}"
    )
    if args.redis_url:
        asyncio.run(bench(args, args.redis_url, "given URL"))
        return
    if shutil.which("redis-server") is None:
        print("skipped agent-state on Redis: no redis-server on PATH and no --redis-url")
        asyncio.run(bench(args, None, ""))
        return
    port = free_port()
    command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port)]
    with server([*command, "--save", "", "--appendonly", "no"], port, "redis-server"):
        asyncio.run(bench(args, f"redis://127.0.0.1:{port}/0", "private redis-server"))


if __name__ == "__main__":
    main()
