"""The bridges next to the frameworks' own stores: per-turn cost and lost updates.

- M365 Agents SDK: its `AgentApplication` on its `MemoryStorage` vs on `AgentStateStorage`
  over our memory store (with `TurnQueueMiddleware`, as docs/m365.md sets it up).
- Google ADK: its `Runner` with an agent that makes no model call, on `InMemorySessionService`
  and `DatabaseSessionService` (SQLite) vs on `AgentStateSessionService` over our memory store.

Per-turn cost: TURNS sequential turns over a pool of conversations (sessions), ROUNDS
interleaved rounds (the order flips every round), median CPU microseconds per turn: the
process's CPU time, threads included (every system here runs in this process), so other work
on a shared machine does not count. The ratio is the median over rounds of the bridge's time
over the peer in-memory store's in that round; each ADK round runs the same `Runner`, agent
and events on each service.
Lost updates: TRIALS trials of 5 concurrent turns on one conversation (session), each reading
a counter, doing 2 ms of "model" work, and adding 1; lost = turns that returned minus what
the counter gained; refused = turns that raised (a conflict or ADK's stale-session error).
Target: the bridge at most 1.5x the peer's in-memory store per turn, and 0 lost updates.

Run: .venv/bin/python benchmarks/bridges.py [--turns 300] [--rounds 7] [--trials 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from _support import StubAdapter, round_order
from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, DatabaseSessionService, InMemorySessionService
from google.genai import types
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState
from microsoft_agents.hosting.core.storage import MemoryStorage as M365MemoryStorage

from agent_state import open_storage
from agent_state.bridges.adk import AgentStateSessionService
from agent_state.bridges.m365 import AgentStateStorage, TurnQueueMiddleware

POOL = 20
CONCURRENT = 5
WORK = 0.002  # seconds of "model" work inside a contended turn

Turn = Callable[[int], Awaitable[None]]


@dataclass
class Row:
    name: str
    peer: str | None  # the in-memory row this one is compared with
    per_turn: list[float] = field(default_factory=list)  # µs per turn, one per round
    lost: int = 0
    refused: int = 0
    turns: int = 0


# --- M365 --------------------------------------------------------------------------------


class NoConnections:
    def get_connection(self, name: str) -> Any:
        raise NotImplementedError

    def get_default_connection(self) -> Any:
        raise NotImplementedError

    def get_token_provider(self, claims_identity: Any, service_url: str) -> Any:
        raise NotImplementedError


def ms_message(conversation: str) -> ms_activity.Activity:
    return ms_activity.Activity(
        type="message", channel_id=cast(Any, "bench"), service_url="http://localhost",
        from_property=ms_activity.ChannelAccount(id="user"),
        recipient=ms_activity.ChannelAccount(id="bot"),
        conversation=ms_activity.ConversationAccount(id=conversation), text="hi",
    )  # fmt: skip


def m365_setup(bridge: bool, work: float) -> tuple[Turn, ms.Storage]:
    storage: ms.Storage = (
        AgentStateStorage(open_storage("memory://")) if bridge else M365MemoryStorage()
    )
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=cast(Any, NoConnections()), start_typing_timer=False
    )

    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = cast(int, state.conversation.get_value("count", lambda: cast(Any, 0)))
        if work:
            await asyncio.sleep(work)
        state.conversation.set_value("count", cast(Any, count + 1))
        await ctx.send_activity(f"count {count + 1}")

    app.activity("message")(on_message)
    adapter = StubAdapter()
    if bridge:
        adapter.use(TurnQueueMiddleware())
    activities = [ms_message(f"c{i}") for i in range(POOL)]

    async def turn(i: int) -> None:
        await adapter.run_pipeline(ms.TurnContext(adapter, activities[i % POOL]), app.on_turn)

    return turn, storage


async def m365_count(storage: ms.Storage) -> int:
    key = "bench/conversations/c0"
    found = await storage.read([key], target_cls=CachedAgentState)
    count: Any = found[key].state.get("count", 0) if key in found else 0
    return int(count)


# --- ADK ---------------------------------------------------------------------------------


class Counter(BaseAgent):
    """Adds 1 to `count` in session state and says so (no model call)."""

    work: float = 0.0

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        count = int(ctx.session.state.get("count", 0))
        if self.work:
            await asyncio.sleep(self.work)
        yield Event(
            author=self.name, invocation_id=ctx.invocation_id,
            content=types.Content(role="model", parts=[types.Part(text=f"count {count + 1}")]),
            actions=EventActions(state_delta={"count": count + 1}),
        )  # fmt: skip


def adk_service(kind: str, folder: str) -> BaseSessionService:
    if kind == "InMemory":
        return InMemorySessionService()
    if kind == "Database(sqlite)":
        return DatabaseSessionService(f"sqlite+aiosqlite:///{folder}/adk-{time.monotonic_ns()}.db")
    return AgentStateSessionService(open_storage("memory://"))


async def adk_setup(kind: str, folder: str, work: float) -> tuple[Turn, BaseSessionService]:
    service = adk_service(kind, folder)
    runner = Runner(
        app_name="bench", agent=Counter(name="counter", work=work), session_service=service
    )
    for i in range(POOL):
        await service.create_session(app_name="bench", user_id="user", session_id=f"s{i}")
    message = types.Content(role="user", parts=[types.Part(text="hi")])

    async def turn(i: int) -> None:
        async for _ in runner.run_async(
            user_id="user", session_id=f"s{i % POOL}", new_message=message
        ):
            pass

    return turn, service


async def adk_count(service: BaseSessionService) -> int:
    session = await service.get_session(app_name="bench", user_id="user", session_id="s0")
    assert session is not None
    return int(session.state.get("count", 0))


# --- driver ------------------------------------------------------------------------------


async def timed(turn: Turn, turns: int) -> float:
    for i in range(POOL):  # warm: every conversation stored once
        await turn(i)
    start = time.process_time()
    for i in range(turns):
        await turn(i)
    return (time.process_time() - start) / turns * 1e6


async def contended(
    row: Row,
    setup: Callable[[], Awaitable[tuple[Turn, Any]]],
    count: Callable[[Any], Awaitable[int]],
) -> None:
    turn, store = await setup()
    before = await count(store)
    results = await asyncio.gather(*[turn(0) for _ in range(CONCURRENT)], return_exceptions=True)
    returned = sum(1 for r in results if not isinstance(r, BaseException))
    row.turns += CONCURRENT
    row.refused += CONCURRENT - returned
    row.lost += returned - (await count(store) - before)


async def main(args: argparse.Namespace) -> None:
    folder = tempfile.mkdtemp(prefix="bench-bridges-")
    m365 = {
        "M365 on its MemoryStorage": Row("M365 on its MemoryStorage", None),
        "M365 on AgentStateStorage (memory)": Row(
            "M365 on AgentStateStorage (memory)", "M365 on its MemoryStorage"
        ),
    }
    adk = {
        "ADK Runner on InMemory": Row("ADK Runner on InMemory", None),
        "ADK Runner on Database(sqlite)": Row(
            "ADK Runner on Database(sqlite)", "ADK Runner on InMemory"
        ),
        "ADK Runner on AgentStateSessionService": Row(
            "ADK Runner on AgentStateSessionService", "ADK Runner on InMemory"
        ),
    }
    kinds = dict(zip(adk, ["InMemory", "Database(sqlite)", "bridge"], strict=True))
    for number in range(args.rounds):
        for name in round_order(list(m365), number):
            turn, _ = m365_setup(name != "M365 on its MemoryStorage", 0.0)
            m365[name].per_turn.append(await timed(turn, args.turns))
        for name in round_order(list(adk), number):
            turn, _ = await adk_setup(kinds[name], folder, 0.0)
            m365_or_adk = adk[name]
            m365_or_adk.per_turn.append(await timed(turn, args.turns // 3))
    for _ in range(args.trials):
        for name, row in m365.items():
            bridge = name != "M365 on its MemoryStorage"

            async def m365_contended(bridge: bool = bridge) -> tuple[Turn, Any]:
                return m365_setup(bridge, WORK)

            await contended(row, m365_contended, m365_count)
        for name, row in adk.items():

            async def adk_contended(kind: str = kinds[name]) -> tuple[Turn, Any]:
                return await adk_setup(kind, folder, WORK)

            await contended(row, adk_contended, adk_count)

    print(f"{args.turns} turns x {args.rounds} rounds (ADK: {args.turns // 3}); "
          f"{args.trials} trials of {CONCURRENT} concurrent turns")  # fmt: skip
    header = f"{'system':<42} {'CPU µs/turn':>11} {'vs peer':>8} {'lost':>10} {'refused':>8}"
    print(header)
    print("-" * len(header))
    verdicts = []
    for rows in (m365, adk):
        for row in rows.values():
            ratio = ""
            if row.peer is not None:
                peer = rows[row.peer]
                value = statistics.median(
                    mine / theirs for mine, theirs in zip(row.per_turn, peer.per_turn, strict=True)
                )
                ratio = f"{value:.2f}x"
                if "AgentState" in row.name:
                    met = value <= 1.5 and row.lost == 0
                    verdicts.append(
                        f"{row.name}: {value:.2f}x, {row.lost} lost: {'met' if met else 'NOT met'}"
                    )
            print(
                f"{row.name:<42} {statistics.median(row.per_turn):>11,.0f} {ratio:>8} "
                f"{row.lost:>4}/{row.turns:<5} {row.refused:>8}"
            )
    print("Target: the bridge <= 1.5x the peer's in-memory store per turn, 0 lost updates.")
    for verdict in verdicts:
        print("  " + verdict)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--trials", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
