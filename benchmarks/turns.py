"""Turns per second and storage calls per turn: agent-state vs the M365 Agents SDK vs Google ADK.

Every system runs the same turn in one process: a message arrives, the handler bumps a
counter in conversation state (or only reads it, for the unchanged rows) and sends a reply.
Turns go round-robin over a pool of conversations, one user each, with state seeded
before timing.

Activities carry an id by default, a fresh one per turn, as real channels send them: our
turn then keeps its delivery evidence (exactly once). The "no ids" scenarios send none, so
no side keeps any evidence. What each row is:

- agent-state: `AgentApplication` on our `MemoryStorage` (one batched read, one conditional
  write, per-conversation queue, exactly once when the activity has an id).
- M365 Agents SDK: its `AgentApplication` + its `MemoryStorage`, each turn a `TurnContext`
  on a stub adapter (no HTTP; typing-indicator timer off). It gets the same activities,
  ids included, but has no exactly-once (nothing records an id), no per-conversation queue,
  and its MemoryStorage writes last-writer-wins (no versions): it does less per turn.
- ADK Runner (bot turn): Google ADK's own turn, `InMemoryRunner.run_async` with an agent
  that makes no model call (it yields one event with the reply and the state delta).
- ADK session service only: `get_session` + `append_event` on `InMemorySessionService`, no
  runner and no reply. Neither ADK row has a storage layer (empty call columns), nor
  exactly-once.
- floor: the turn's work done directly on our MemoryStorage's primitives, the minimal
  design: one batched read of the turn's keys (the delivery evidence travels inside the
  documents, so it is read with them), the handler's edit, change detection by bytes, one
  conditional write of the changed document (with an id, carrying the evidence), and the
  reply `Activity`. No framework, no checks. Its evidence is what our guarantees need, like
  for like: per activity the time (retention window), a SHA-256 of the activity's whole
  JSON form (hostile senders) and the reply texts sealed with a key from the same bytes
  (a forgotten user's replies stay unreadable), compact (a list per entry), the newest
  `EVIDENCE_LIMIT` (32, our bound) kept, expired ones dropped.

Each scenario runs as a full bot turn (the handler sends a reply) and state-only (nobody
replies; the ADK runner's event then carries no reply text). Rounds are interleaved
(every system once per round, in a rotating order); a figure is the median of its rounds,
a ratio the median of the rounds' own ratios. The targets (issue 23) are printed last.

With `--with-backends` it then prints the state-size sweep (`state_size.py`), the file and
Redis turns next to their floors (`backend_turns.py`) and the Azure backends' turns
(`blob.py`, `cosmos.py`).

Run: .venv/bin/python benchmarks/turns.py [--rounds 5] [--round-seconds 0.15] [--with-backends]
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
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import backend_turns
import orjson
from _support import (
    ROOT,
    NoConnections,
    StubAdapter,
    keep_evidence,
    message,
    ms_get,
    ms_message,
    ms_set,
    unapplied,
    wire_of,
)
from google.adk.agents import BaseAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event, EventActions
from google.adk.runners import InMemoryRunner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from microsoft_agents.hosting import core as ms

from agent_state import (
    Activity,
    AgentApplication,
    TurnContext,
    TurnState,
    app_key,
    conversation_key,
    session_key,
    user_key,
)
from agent_state.backends import CONFLICT, MemoryStorage, Outcomes, PreparedWrite, StoreItem

POOL = 500
"""Conversations the turns rotate over (keeps ADK's per-session event list short)."""

BIG_BYTES = 50 * 1024


@dataclass(frozen=True)
class Scenario:
    name: str
    big: bool
    changes: bool
    replies: bool
    ids: bool = False
    """Whether each activity carries a fresh id (then our turn keeps delivery evidence)."""


def _scenario(big: bool, changes: bool, replies: bool, ids: bool) -> Scenario:
    size = "50 KB state" if big else "small state"
    name = f"{size}, {'changed' if changes else 'unchanged'}"
    name += ", state only" if not replies else ""
    name += ", ids" if ids else ", no ids"
    return Scenario(name, big, changes, replies, ids)


SCENARIOS = [
    _scenario(big=False, changes=True, replies=True, ids=True),
    _scenario(big=False, changes=False, replies=True, ids=True),
    _scenario(big=True, changes=True, replies=True, ids=True),
    _scenario(big=False, changes=True, replies=False, ids=True),
    _scenario(big=False, changes=True, replies=True, ids=False),
    _scenario(big=False, changes=False, replies=True, ids=False),
    _scenario(big=True, changes=True, replies=True, ids=False),
    _scenario(big=False, changes=True, replies=False, ids=False),
]
"""With ids first (the default traffic), then the same turns without ids, labelled."""


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
"""Turn `i` (every `i` a system is given is new, so an id made from it is fresh)."""
Setup = Callable[["Scenario"], Awaitable[tuple[Turn, "Counts | None"]]]


def incoming(scenario: Scenario, i: int, pool: list[Activity]) -> Activity:
    """Turn `i`'s activity: the pool's one for its conversation, with a fresh id if asked."""
    activity = pool[i % POOL]
    return activity.model_copy(update={"id": f"a{i}"}) if scenario.ids else activity


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
        await app.process(incoming(scenario, i, activities))

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

    activities = [ms_message("bench", f"user-{i}", f"conv-{i}") for i in range(POOL)]
    seed = seed_state(scenario.big)
    for activity in activities:
        ctx = ms.TurnContext(adapter, activity)
        state = ms.TurnState.with_storage(storage)
        await state.load(ctx, storage)
        for name, value in seed.items():
            ms_set(state.conversation, name, value)
        await state.save(ctx)

    async def turn(i: int) -> None:
        activity = activities[i % POOL]
        if scenario.ids:
            activity = activity.model_copy(update={"id": f"a{i}"})
        await app.on_turn(ms.TurnContext(adapter, activity))

    return turn, storage.counts


# --- Google ADK -----------------------------------------------------------------------------


async def adk_sessions(scenario: Scenario) -> tuple[Turn, None]:
    """ADK's session service alone: read the session, append an event with the delta."""
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


class CountingAgent(BaseAgent):
    """An ADK agent that makes no model call: one event with the reply and the state delta."""

    changes: bool
    replies: bool

    async def _run_async_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        count = ctx.session.state.get("count", 0)
        delta: dict[str, object] = {}
        if self.changes:
            count += 1
            delta["count"] = count
        content = None
        if self.replies:
            content = types.Content(role="model", parts=[types.Part(text=f"count {count}")])
        yield Event(
            invocation_id=ctx.invocation_id,
            author=self.name,
            content=content,
            actions=EventActions(state_delta=delta),
        )


async def adk_runner(scenario: Scenario) -> tuple[Turn, None]:
    """ADK's own bot turn: `InMemoryRunner.run_async` with the message, to the last event."""
    agent = CountingAgent(name="bench", changes=scenario.changes, replies=scenario.replies)
    runner = InMemoryRunner(agent=agent, app_name="bench")
    seed = seed_state(scenario.big)
    for i in range(POOL):
        await runner.session_service.create_session(
            app_name="bench", user_id=f"user-{i}", session_id=f"conv-{i}", state=seed
        )
    hi = types.Content(role="user", parts=[types.Part(text="hi")])

    async def turn(i: int) -> None:
        n = i % POOL
        async for _ in runner.run_async(
            user_id=f"user-{n}", session_id=f"conv-{n}", new_message=hi
        ):
            pass

    return turn, None


# --- the floor ------------------------------------------------------------------------------


async def floor(scenario: Scenario) -> tuple[Turn, Counts]:
    """The turn's work on MemoryStorage's primitives, the minimal design: `_read` of the
    turn's four keys (delivery evidence is inside the documents, so a redelivery is found
    there), the edit, `orjson.dumps` and a bytes comparison with what was read, and for a
    change (or, with an id, always: the evidence) one `_write` conditional on the version
    read, then the reply `Activity`. Keys are built once per conversation."""
    store = MemoryStorage()
    counts = Counts()
    seed = seed_state(scenario.big)
    pool = [message(i) for i in range(POOL)]
    keys = [
        [
            user_key("bench", f"user-{i}"),
            conversation_key("bench", f"conv-{i}"),
            session_key("bench", f"conv-{i}", f"user-{i}"),
            app_key("bench"),
        ]
        for i in range(POOL)
    ]
    await store.write({group[1]: StoreItem(seed, None) for group in keys})

    async def turn(i: int) -> None:
        activity = incoming(scenario, i, pool)
        group = keys[i % POOL]
        items = await store._read(group)
        counts.reads += 1
        if activity.id is not None and not unapplied(
            activity.id, (item.value for item in items.values())
        ):
            raise AssertionError("a fresh id was found applied")
        stored = items[group[1]]
        doc = stored.value
        count = doc["count"]
        if scenario.changes:
            count += 1
            doc["count"] = count
        replies = [activity.reply(f"count {count}")] if scenario.replies else []
        if activity.id is not None:
            texts = [r.text or "" for r in replies]
            keep_evidence(doc, activity.id, wire_of(activity), texts, time.time())
        data = orjson.dumps(doc)
        if data != stored.data:
            outcomes: Outcomes = {}
            write = PreparedWrite(group[1], data, doc, stored.etag, group[1], None)
            await store._write([write], outcomes)
            if outcomes[group[1]] is CONFLICT:
                raise AssertionError("the floor's conditional write failed")
            counts.writes += 1

    return turn, counts


# --- driver ---------------------------------------------------------------------------------

SYSTEMS: dict[str, Setup] = {
    "agent-state": ours,
    "M365 Agents SDK": microsoft,
    "ADK Runner (bot turn)": adk_runner,
    "ADK session service only": adk_sessions,
    "floor": floor,
}


@dataclass
class Result:
    rates: list[float]
    reads_per_turn: float | None
    writes_per_turn: float | None

    @property
    def turns_per_second(self) -> float:
        return statistics.median(self.rates)

    def ratio_to(self, other: Result) -> float:
        """The median over rounds of this row's turns/s over `other`'s in the same round."""
        return statistics.median(a / b for a, b in zip(self.rates, other.rates, strict=True))


async def measure(scenario: Scenario, rounds: int, round_seconds: float) -> dict[str, Result]:
    """Every system's turns/s per interleaved round (after one warm-up pass over the pool);
    storage calls are averaged over every timed turn."""
    setups = {name: await setup(scenario) for name, setup in SYSTEMS.items()}
    for turn, counts in setups.values():
        for i in range(POOL):
            await turn(i)
        if counts is not None:
            counts.reads = counts.writes = 0
    rates: dict[str, list[float]] = {name: [] for name in setups}
    totals = dict.fromkeys(setups, POOL)  # turn numbers go on from the warm-up's: fresh ids
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
        timed = totals[name] - POOL
        if counts is None:
            results[name] = Result(rates[name], None, None)
        else:
            results[name] = Result(rates[name], counts.reads / timed, counts.writes / timed)
    return results


def fmt_calls(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


async def memory_table(args: argparse.Namespace) -> bool:
    """Every system on every scenario, then the targets; whether all were met."""
    print(
        f"{datetime.date.today()} · Python {platform.python_version()} · {os.cpu_count()} cores"
        f" · medians of {args.rounds} interleaved rounds of {args.round_seconds} s"
        " · in-memory storage on every side"
    )
    print(
        "Rows: agent-state AgentApplication | M365 SDK AgentApplication (no exactly-once, no"
        " versions) | ADK's Runner bot turn (agent without a model call) | ADK's session"
        " service alone | floor (the turn on MemoryStorage primitives: 1 read incl. evidence,"
        " 1 conditional write). 'ids': a fresh activity id per turn; 'no ids': none."
    )
    header = (
        f"{'scenario':<40} {'system':<25} {'turns/s':>9} {'reads/turn':>11} "
        f"{'writes/turn':>12} {'ours / it':>10}"
    )
    print(header)
    print("-" * len(header))
    measured: dict[str, dict[str, Result]] = {}
    for scenario in SCENARIOS:
        results = await measure(scenario, args.rounds, args.round_seconds)
        measured[scenario.name] = results
        ours_result = results["agent-state"]
        for name, result in results.items():
            ratio = "" if result is ours_result else f"{ours_result.ratio_to(result):.2f}x"
            print(
                f"{scenario.name:<40} {name:<25} {result.turns_per_second:>9,.0f} "
                f"{fmt_calls(result.reads_per_turn):>11} "
                f"{fmt_calls(result.writes_per_turn):>12} {ratio:>10}"
            )
        print()
    return report_targets(measured)


def report_targets(measured: dict[str, dict[str, Result]]) -> bool:
    """Issue 23's memory targets, each as a met / NOT met line; whether all were met."""
    bot_ids = measured[_scenario(False, True, True, True).name]
    bot = measured[_scenario(False, True, True, False).name]
    state_ids = measured[_scenario(False, True, False, True).name]
    m365, floor_name = "M365 Agents SDK", "floor"

    def vs(results: dict[str, Result], other: str, system: str = "agent-state") -> float:
        return results[system].ratio_to(results[other])

    of_floor = 1 / vs(bot_ids, floor_name)  # our time per turn over the floor's
    lines = [  # label, the scenario's results, target, whether ours must be at least it
        ("small changed bot turn, ids: >= 10x the M365 SDK", bot_ids, 10.0, True),
        ("small changed bot turn, no ids: >= 20x the M365 SDK", bot, 20.0, True),
        ("small changed state-only turn, ids: >= 8x the M365 SDK", state_ids, 8.0, True),
    ]
    print("Targets (issue 23; ratios are medians of per-round ratios; the floor's own ratio to")
    print("the M365 SDK beside each: a target above it is out of reach of any turn that keeps")
    print("the floor's guarantees):")
    all_met = True
    rows: list[tuple[str, float, float, bool, float | None]] = [
        (label, vs(r, m365), target, at_least, vs(r, m365, floor_name))
        for label, r, target, at_least in lines
    ]
    rows.append(("small changed bot turn, ids: <= 3x the floor's time", of_floor, 3.0, False, None))
    for label, value, target, at_least, floor_ratio in rows:
        met = value >= target if at_least else value <= target
        all_met &= met
        beside = f"  (floor {floor_ratio:.2f}x)" if floor_ratio is not None else ""
        print(f"  {label:<58} {value:6.2f}x  {'met' if met else 'NOT met'}{beside}")
    return all_met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument(
        "--round-seconds", type=float, default=0.15, help="seconds per system and round"
    )
    parser.add_argument(
        "--with-backends",
        action="store_true",
        help="then the size sweep, the file/Redis floors and the Azure backends",
    )
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    args = parser.parse_args()
    met = asyncio.run(memory_table(args))
    if not args.with_backends:
        return 0 if met else 1
    # a process of its own: the heap the systems above leave behind would make the garbage
    # collector's passes, which decoding a 1 MB document triggers, cost more than the turn
    sweep = [sys.executable, str(Path(__file__).with_name("state_size.py"))]
    subprocess.run([*sweep, "--rounds", str(args.rounds)], check=True)
    backend_turns.run_on(args.redis_url, args.rounds, 2 * args.round_seconds)
    for script in ("blob.py", "cosmos.py"):
        command = [sys.executable, str(Path(__file__).with_name(script))]
        # each prints its table and exits 1 when it misses a target: this run goes on
        subprocess.run([*command, "--rounds", str(args.rounds)], cwd=ROOT)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
