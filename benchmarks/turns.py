"""Turns per second and storage calls per turn: agent-state vs the M365 Agents SDK vs Google ADK.

Every system runs the same turn in one process: a message arrives, the handler bumps a
counter in conversation state (or only reads it, for the unchanged rows) and sends a reply.
Turns go round-robin over a pool of conversations, one user each, with state seeded
before timing.

- agent-state: `AgentApplication` on `MemoryStorage`.
- Microsoft 365 Agents SDK: its `AgentApplication` + `MemoryStorage`, each turn a
  `TurnContext` on a stub adapter (no HTTP; typing-indicator timer off, so only routing
  and state are compared).
- Google ADK: `get_session` + `append_event` on `InMemorySessionService`, which has no
  storage layer, so its storage-call columns are empty.
- floor: the turn's work done directly (key lookup, `orjson.loads` copy, edit,
  `orjson.dumps`, a versioned store, the reply `Activity`), no framework.

Our activities carry no id (ids repeat as the turns rotate, and a repeated id is a
redelivery, which agent-state does not apply twice), so no side keeps delivery records.
Each scenario runs twice: as a full bot turn (the handler sends a reply) and state-only
(neither side replies; ADK never does). Rounds are interleaved (every system once per
round, in a rotating order) and each system's figure is the median of its rounds.

After that table it prints the state-size sweep (`state_size.py`), each backend's turn
next to its floor (`backend_turns.py`: files, and Redis on a private server), and the
Azure backends' turns next to their raw-SDK floors and the M365 SDK's own storages
(`blob.py` on loopback, on a private Azurite unless $AGENT_STATE_AZURITE_CONNECTION_STRING
names one; `cosmos.py` on a private run of the project's emulator).

Run: .venv/bin/python benchmarks/turns.py [--rounds 7] [--round-seconds 0.25] [--memory-only]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import backend_turns
import orjson
from _support import ROOT, NoConnections, StubAdapter, message, ms_get, ms_message, ms_set
from google.adk.events import Event, EventActions
from google.adk.sessions import InMemorySessionService
from microsoft_agents.hosting import core as ms

from agent_state import AgentApplication, TurnContext, TurnState, conversation_key
from agent_state.backends import MemoryStorage, StoreItem

POOL = 500
"""Conversations the turns rotate over (keeps ADK's per-session event list short)."""

BIG_BYTES = 50 * 1024


@dataclass(frozen=True)
class Scenario:
    name: str
    big: bool
    changes: bool
    replies: bool


SCENARIOS = [
    Scenario(f"{size}, {change}{', state only' if not replies else ''}", big, changes, replies)
    for replies in (True, False)
    for size, big in (("small state", False), ("50 KB state", True))
    for change, changes in (("changed", True), ("unchanged", False))
]


def seed_state(big: bool) -> dict[str, Any]:
    """The conversation document every system starts from: a counter, plus 50 KB of history."""
    doc: dict[str, Any] = {"count": 0, "topic": "benchmarks"}
    if big:
        entry = {"role": "user", "text": "x" * 80, "ts": "2025-01-01T00:00:00Z"}
        doc["history"] = []
        while len(orjson.dumps(doc)) < BIG_BYTES:
            doc["history"].append(dict(entry, n=len(doc["history"])))
    return doc


@dataclass
class Counts:
    reads: int = 0
    writes: int = 0


Turn = Callable[[int], Awaitable[None]]
Setup = Callable[["Scenario"], Awaitable[tuple[Turn, "Counts | None"]]]


# --- agent-state ----------------------------------------------------------------------------


class CountingStorage(MemoryStorage):
    """Our MemoryStorage, counting batched read and write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        self.counts.reads += 1
        return await super().read(keys)

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        self.counts.writes += 1
        return await super().write(changes, ttl=ttl, unchanged=unchanged)


async def ours(scenario: Scenario) -> tuple[Turn, Counts]:
    storage = CountingStorage()
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        if scenario.changes:
            count += 1
            state["conversation:count"] = count
        if scenario.replies:
            await ctx.send(f"count {count}")

    activities = [message(i) for i in range(POOL)]
    seed = seed_state(scenario.big)
    await storage.write(
        {conversation_key("bench", f"conv-{i}"): StoreItem(seed, None) for i in range(POOL)}
    )

    async def turn(i: int) -> None:
        await app.process(activities[i % POOL])

    return turn, storage.counts


# --- Microsoft 365 Agents SDK ---------------------------------------------------------------


MsItem = TypeVar("MsItem", bound=ms.StoreItem)


class MsCountingStorage(ms.MemoryStorage):
    """The SDK's MemoryStorage, counting read and write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()

    async def read(
        self, keys: list[str], *, target_cls: type[MsItem], **kwargs: Any
    ) -> dict[str, MsItem]:
        self.counts.reads += 1
        return await super().read(keys, target_cls=target_cls, **kwargs)

    async def write(self, changes: dict[str, ms.StoreItem]) -> None:
        self.counts.writes += 1
        await super().write(changes)


async def microsoft(scenario: Scenario) -> tuple[Turn, Counts]:
    storage = MsCountingStorage()
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=NoConnections(), start_typing_timer=False
    )
    adapter = StubAdapter()

    @app.activity("message")
    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = ms_get(state.conversation, "count", 0)
        if scenario.changes:
            count += 1
            ms_set(state.conversation, "count", count)
        if scenario.replies:
            await ctx.send_activity(f"count {count}")

    activities = [ms_message("bench", f"user-{i}", f"conv-{i}", f"a{i}") for i in range(POOL)]
    seed = seed_state(scenario.big)
    for activity in activities:
        ctx = ms.TurnContext(adapter, activity)
        state = ms.TurnState.with_storage(storage)
        await state.load(ctx, storage)
        for name, value in seed.items():
            ms_set(state.conversation, name, value)
        await state.save(ctx)

    async def turn(i: int) -> None:
        await app.on_turn(ms.TurnContext(adapter, activities[i % POOL]))

    return turn, storage.counts


# --- Google ADK -----------------------------------------------------------------------------


async def adk(scenario: Scenario) -> tuple[Turn, None]:
    service = InMemorySessionService()
    seed = seed_state(scenario.big)
    for i in range(POOL):
        await service.create_session(
            app_name="bench", user_id=f"user-{i}", session_id=f"conv-{i}", state=seed
        )

    async def turn(i: int) -> None:
        n = i % POOL
        session = await service.get_session(
            app_name="bench", user_id=f"user-{n}", session_id=f"conv-{n}"
        )
        assert session is not None
        count = session.state.get("count", 0)
        delta = {"count": count + 1} if scenario.changes else {}
        event = Event(
            invocation_id=f"inv-{i}", author="user", actions=EventActions(state_delta=delta)
        )
        await service.append_event(session, event)

    return turn, None


# --- the floor ------------------------------------------------------------------------------


async def floor(scenario: Scenario) -> tuple[Turn, Counts]:
    """The same turn's work done directly: look the key up, copy the stored document out
    (`orjson.loads`), edit it, `orjson.dumps` it and store it if the version is unchanged,
    and build the reply `Activity`; nothing else (no framework, no checks)."""
    seed = orjson.dumps(seed_state(scenario.big))
    store: dict[str, tuple[int, bytes]] = {f"conv-{i}": (0, seed) for i in range(POOL)}
    incoming = [message(i) for i in range(POOL)]
    counts = Counts()

    async def turn(i: int) -> None:
        activity = incoming[i % POOL]
        key = cast(str, activity.conversation.id)  # type: ignore[union-attr]  # set: message()
        version, data = store[key]
        counts.reads += 1
        doc = orjson.loads(data)
        count = doc["count"]
        if scenario.changes:
            count += 1
            doc["count"] = count
            encoded = orjson.dumps(doc)
            if store[key][0] == version:
                store[key] = (version + 1, encoded)
                counts.writes += 1
        if scenario.replies:
            activity.reply(f"count {count}")

    return turn, counts


# --- driver ---------------------------------------------------------------------------------

SYSTEMS: dict[str, Setup] = {
    "agent-state": ours,
    "M365 Agents SDK": microsoft,
    "Google ADK": adk,
    "floor": floor,
}


@dataclass
class Result:
    turns_per_second: float
    reads_per_turn: float | None
    writes_per_turn: float | None


async def measure(scenario: Scenario, rounds: int, round_seconds: float) -> dict[str, Result]:
    """Every system's median turns/s over interleaved rounds (after one warm-up pass over the
    pool); storage calls are averaged over every timed turn."""
    setups = {name: await setup(scenario) for name, setup in SYSTEMS.items()}
    for turn, counts in setups.values():
        for i in range(POOL):
            await turn(i)
        if counts is not None:
            counts.reads = counts.writes = 0
    rates: dict[str, list[float]] = {name: [] for name in setups}
    totals = dict.fromkeys(setups, 0)
    names = list(setups)
    for number in range(rounds):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            turn = setups[name][0]
            done, start = 0, time.perf_counter()
            while (elapsed := time.perf_counter() - start) < round_seconds:
                for i in range(totals[name] + done, totals[name] + done + 50):
                    await turn(i)
                done += 50
            rates[name].append(done / elapsed)
            totals[name] += done
    results = {}
    for name, (_, counts) in setups.items():
        median = statistics.median(rates[name])
        if counts is None:
            results[name] = Result(median, None, None)
        else:
            results[name] = Result(
                median, counts.reads / totals[name], counts.writes / totals[name]
            )
    return results


def fmt_calls(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


async def memory_table(args: argparse.Namespace) -> None:
    """Every system on every scenario, then the verdicts."""

    print(
        f"{datetime.date.today()} · Python {platform.python_version()} · {os.cpu_count()} cores"
        f" · medians of {args.rounds} interleaved rounds · MemoryStorage on every side"
    )
    header = (
        f"{'scenario':<36} {'system':<16} {'turns/s':>10} {'reads/turn':>11} "
        f"{'writes/turn':>12} {'ours / theirs':>14}"
    )
    print(header)
    print("-" * len(header))
    verdicts = []
    for scenario in SCENARIOS:
        results = await measure(scenario, args.rounds, args.round_seconds)
        ours_result = results["agent-state"]
        for name, result in results.items():
            ratio = ours_result.turns_per_second / result.turns_per_second
            print(
                f"{scenario.name:<36} {name:<16} {result.turns_per_second:>10,.0f} "
                f"{fmt_calls(result.reads_per_turn):>11} "
                f"{fmt_calls(result.writes_per_turn):>12} "
                f"{'' if result is ours_result else f'{ratio:.1f}x':>14}"
            )
        print()
        ratio = ours_result.turns_per_second / results["M365 Agents SDK"].turns_per_second
        of_floor = results["floor"].turns_per_second / ours_result.turns_per_second
        calls_ok = ours_result.reads_per_turn == 1 and ours_result.writes_per_turn == (
            1 if scenario.changes else 0
        )
        verdicts.append(
            f"{scenario.name:<36} {ratio:5.1f}x the M365 SDK ({_met(ratio >= 10)}); "
            f"{of_floor:4.1f}x the floor's time ({_met(of_floor <= 3)}); storage calls "
            f"{ours_result.reads_per_turn:.0f} read + {ours_result.writes_per_turn:.0f} write "
            f"per turn ({_met(calls_ok)})"
        )
    print("Targets: >= 10x the M365 Agents SDK's turns/s; within 3x of the floor's time per turn;")
    print("1 read and at most 1 write per turn, none when unchanged.")
    for verdict in verdicts:
        print("  " + verdict)


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument(
        "--round-seconds", type=float, default=0.25, help="seconds per system and round"
    )
    parser.add_argument(
        "--memory-only", action="store_true", help="skip the size sweep and the backends"
    )
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    asyncio.run(memory_table(args))
    if args.memory_only:
        return
    # a process of its own: the heap the systems above leave behind would make the garbage
    # collector's passes, which decoding a 1 MB document triggers, cost more than the turn
    sweep = [sys.executable, str(Path(__file__).with_name("state_size.py"))]
    subprocess.run([*sweep, "--rounds", str(args.rounds)], check=True)
    backend_turns.run_on(args.redis_url, args.rounds, 2 * args.round_seconds)
    for script, options in (("blob.py", ["--rtt-ms", "0"]), ("cosmos.py", [])):
        command = [sys.executable, str(Path(__file__).with_name(script)), *options]
        # each prints its table and exits 1 when it misses a target: this run goes on
        subprocess.run([*command, "--turns", "100", "--rounds", str(args.rounds)], cwd=ROOT)


if __name__ == "__main__":
    main()
