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

Run: .venv/bin/python benchmarks/turns.py [--seconds 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson
from google.adk.events import Event, EventActions
from google.adk.sessions import InMemorySessionService
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.hosting.core.channel_adapter import ChannelAdapter

from agent_state._activity import Activity
from agent_state._app import AgentApplication
from agent_state._context import TurnContext
from agent_state._keys import conversation_key
from agent_state._turn_state import TurnState
from agent_state.backends import MemoryStorage, StoreItem

POOL = 500
"""Conversations the turns rotate over (keeps ADK's per-session event list short)."""

BIG_BYTES = 50 * 1024


@dataclass(frozen=True)
class Scenario:
    name: str
    big: bool
    changes: bool


SCENARIOS = [
    Scenario("small state, changed", big=False, changes=True),
    Scenario("50 KB state, changed", big=True, changes=True),
    Scenario("small state, unchanged", big=False, changes=False),
    Scenario("50 KB state, unchanged", big=True, changes=False),
]


def seed_state(big: bool) -> dict:
    """The conversation document every system starts from: a counter, plus 50 KB of history."""
    doc: dict = {"count": 0, "topic": "benchmarks"}
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
    """Our MemoryStorage, counting batched read (`read`, `read_shared`) and write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()

    async def read(self, keys):
        self.counts.reads += 1
        return await super().read(keys)

    async def read_shared(self, keys):  # the framework's read: it never edits what it loads
        self.counts.reads += 1
        return await super().read_shared(keys)

    async def write(self, changes, *, ttl=None):
        self.counts.writes += 1
        return await super().write(changes, ttl=ttl)


async def ours(scenario: Scenario) -> tuple[Turn, Counts]:
    storage = CountingStorage()
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        if scenario.changes:
            count += 1
            state["conversation:count"] = count
        await ctx.send(f"count {count}")

    activities = [
        Activity(
            id=f"a{i}",
            channel_id="bench",
            from_={"id": f"user-{i}"},
            recipient={"id": "bot"},
            conversation={"id": f"conv-{i}"},
            text="hi",
        )
        for i in range(POOL)
    ]
    seed = seed_state(scenario.big)
    await storage.write(
        {conversation_key("bench", f"conv-{i}"): StoreItem(seed, None) for i in range(POOL)}
    )

    async def turn(i: int) -> None:
        await app.process(activities[i % POOL])

    return turn, storage.counts


# --- Microsoft 365 Agents SDK ---------------------------------------------------------------


class MsCountingStorage(ms.MemoryStorage):
    """The SDK's MemoryStorage, counting read and write calls."""

    def __init__(self) -> None:
        super().__init__()
        self.counts = Counts()

    async def read(self, keys, *, target_cls, **kwargs):
        self.counts.reads += 1
        return await super().read(keys, target_cls=target_cls, **kwargs)

    async def write(self, changes):
        self.counts.writes += 1
        return await super().write(changes)


class StubAdapter(ChannelAdapter):
    """Keeps sent activities on the turn instead of posting them to a channel."""

    async def send_activities(self, context, activities):
        context.turn_state.setdefault("replies", []).extend(activities)
        return [ms_activity.ResourceResponse(id=str(i)) for i in range(len(activities))]

    async def update_activity(self, context, activity):
        raise NotImplementedError

    async def delete_activity(self, context, reference):
        raise NotImplementedError


class NoConnections:
    """A connection manager for an app without OAuth routes (never called)."""

    def get_connection(self, connection_name):
        raise NotImplementedError

    def get_default_connection(self):
        raise NotImplementedError

    def get_token_provider(self, claims_identity, service_url):
        raise NotImplementedError

    def get_token_provider_from_activity(self, claims_identity, activity):
        raise NotImplementedError


async def microsoft(scenario: Scenario) -> tuple[Turn, Counts]:
    storage = MsCountingStorage()
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=NoConnections(), start_typing_timer=False
    )
    adapter = StubAdapter()

    @app.activity("message")
    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = state.conversation.get_value("count", lambda: 0)
        if scenario.changes:
            count += 1
            state.conversation.set_value("count", count)
        await ctx.send_activity(f"count {count}")

    activities = [
        ms_activity.Activity(
            type="message",
            id=f"a{i}",
            channel_id="bench",
            service_url="http://localhost",
            from_property=ms_activity.ChannelAccount(id=f"user-{i}"),
            recipient=ms_activity.ChannelAccount(id="bot"),
            conversation=ms_activity.ConversationAccount(id=f"conv-{i}"),
            text="hi",
        )
        for i in range(POOL)
    ]
    seed = seed_state(scenario.big)
    for activity in activities:
        ctx = ms.TurnContext(adapter, activity)
        state = ms.TurnState.with_storage(storage)
        await state.load(ctx, storage)
        for name, value in seed.items():
            state.conversation.set_value(name, value)
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
        count = session.state.get("count", 0)
        delta = {"count": count + 1} if scenario.changes else {}
        event = Event(
            invocation_id=f"inv-{i}", author="user", actions=EventActions(state_delta=delta)
        )
        await service.append_event(session, event)

    return turn, None


# --- driver ---------------------------------------------------------------------------------

SYSTEMS: dict[str, Setup] = {
    "agent-state": ours,
    "M365 Agents SDK": microsoft,
    "Google ADK": adk,
}


@dataclass
class Result:
    turns_per_second: float
    reads_per_turn: float | None
    writes_per_turn: float | None


async def measure(system: str, scenario: Scenario, seconds: float) -> Result:
    """Best of three timed runs of `seconds / 3` each (after one warm-up pass over the pool);
    storage calls are averaged over every timed turn."""
    turn, counts = await SYSTEMS[system](scenario)
    for i in range(POOL):
        await turn(i)
    calls = counts or Counts()
    calls.reads = calls.writes = 0
    best, total = 0.0, 0
    for _ in range(3):
        done, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / 3:
            for i in range(done, done + 100):
                await turn(i)
            done += 100
        best, total = max(best, done / elapsed), total + done
    if counts is None:
        return Result(best, None, None)
    return Result(best, counts.reads / total, counts.writes / total)


def fmt_calls(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=1.5,
        help="timed seconds per system and scenario (default 1.5)",
    )
    args = parser.parse_args()

    header = (
        f"{'scenario':<24} {'system':<16} {'turns/s':>10} {'reads/turn':>11} "
        f"{'writes/turn':>12} {'ours / theirs':>14}"
    )
    print(header)
    print("-" * len(header))
    verdicts = []
    for scenario in SCENARIOS:
        results = {name: await measure(name, scenario, args.seconds) for name in SYSTEMS}
        ours_result = results["agent-state"]
        for name, result in results.items():
            ratio = ours_result.turns_per_second / result.turns_per_second
            print(
                f"{scenario.name:<24} {name:<16} {result.turns_per_second:>10,.0f} "
                f"{fmt_calls(result.reads_per_turn):>11} "
                f"{fmt_calls(result.writes_per_turn):>12} "
                f"{'' if result is ours_result else f'{ratio:.1f}x':>14}"
            )
        print()
        ratio = ours_result.turns_per_second / results["M365 Agents SDK"].turns_per_second
        calls_ok = ours_result.reads_per_turn == 1 and ours_result.writes_per_turn == (
            1 if scenario.changes else 0
        )
        verdicts.append(
            f"{scenario.name:<24} {ratio:5.1f}x the M365 SDK "
            f"({'met' if ratio >= 10 else 'missed'} the 10x target); storage calls "
            f"{ours_result.reads_per_turn:.0f} read + {ours_result.writes_per_turn:.0f} write "
            f"per turn ({'met' if calls_ok else 'missed'})"
        )
    print("Targets: >= 10x the M365 Agents SDK's turns/s; 1 read and at most 1 write per turn,")
    print("none when unchanged.")
    for verdict in verdicts:
        print("  " + verdict)


if __name__ == "__main__":
    asyncio.run(main())
