"""Where a small turn's time goes: `turns.py`'s state-only changed turn, built up one layer of
agent-state at a time, next to `turns.py`'s floor and the M365 Agents SDK's same turn.

Every row does the same work on MemoryStorage: read the turn's four keys in one batch, bump
`count` in the conversation document, write it back conditionally (no reply on any row).
Each row adds one layer to the row above it:

- our parts only: the plan's keys, `MemoryStorage._read`, the conversation bucket, its
  `get` and `[]=`, `pending_write`, `_prepare` and `_write` (no checks of the contract);
- + storage contract: `Storage.read` and `Storage.write` (key checks, intents, etags);
- + TurnState: scope-prefixed paths, the turn's buckets and read tracking, `save_documents`;
- + open_turn: the context manager and the merge policy for a conflicting save;
- + run_turn: the re-run policy around the turn;
- AgentApplication: the activity's ids, routing, the conversation queue, the TurnContext.

Rows are interleaved per round, timed in CPU seconds, medians. This is a diagnostic for
issue 16's memory targets (>= 10x the M365 SDK, within 3x of the floor): it shows what the
layers cost, and how far even the parts alone are from the floor.

Run: .venv/bin/python benchmarks/layers.py [--rounds 11] [--turns 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from _support import message
from turns import Scenario, floor, microsoft

from agent_state import (
    AgentApplication,
    Scopes,
    TurnContext,
    TurnIds,
    TurnState,
    conversation_key,
    open_turn,
)
from agent_state._bucket import document_of
from agent_state._document import Document
from agent_state._lifecycle import run_turn, save_documents
from agent_state._plan import Plan
from agent_state.backends import MemoryStorage, Outcomes, StoreItem

POOL = 500
SCENARIO = Scenario("small state, changed, state only", big=False, changes=True, replies=False)
Turn = Callable[[int], Awaitable[None]]


async def layered() -> dict[str, Turn]:
    """Our turn at each layer, on one seeded MemoryStorage (each row its own documents)."""
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:count"] = state.get("conversation.count", 0) + 1

    async def bump(state: TurnState, attempt: int) -> None:
        state["conversation:count"] = state.get("conversation.count", 0) + 1

    rows = ("parts", "contract", "turn_state", "open_turn", "run_turn", "app")
    ids = {  # each row on its own channel, so rows never share documents
        row: [TurnIds(row, f"user-{n}", f"conv-{n}", "bench") for n in range(POOL)] for row in rows
    }
    incoming = [message(n).model_copy(update={"channel_id": "app"}) for n in range(POOL)]
    seed = {"count": 0, "topic": "benchmarks"}
    await storage.write(
        {
            conversation_key(row, f"conv-{n}"): StoreItem(seed, None)
            for row in rows
            for n in range(POOL)
        }
    )
    scopes = Scopes()

    def ids_of(row: str, i: int) -> TurnIds:
        return ids[row][i % POOL]

    def bumped(plan: Plan, found: dict[str, StoreItem]) -> tuple[str, Document, StoreItem]:
        """The conversation's key and bucket document in `found`, its count bumped, and its
        write."""
        cls, key = plan.scopes["conversation"]
        assert key is not None
        bucket = cls(key, found.get(key))
        bucket["count"] = bucket.get("count", 0) + 1
        document = document_of(bucket)
        item = document.pending_write()
        assert item is not None
        return key, document, item

    async def parts(i: int) -> None:
        plan = scopes.plan(ids_of("parts", i))
        key, document, item = bumped(plan, await storage._read(list(plan.keys)))
        outcomes: Outcomes = {}
        await storage._write([storage._prepare(key, item)], outcomes)
        document.mark_saved(str(outcomes[key]))

    async def contract(i: int) -> None:
        plan = scopes.plan(ids_of("contract", i))
        key, document, item = bumped(plan, await storage.read(plan.keys))
        document.mark_saved((await storage.write({key: item}))[key])

    async def turn_state(i: int) -> None:
        state = TurnState(ids_of("turn_state", i), scopes, read=storage.read)
        await state.load()
        await bump(state, 1)
        await save_documents(storage, state.stored_documents())
        state.close()

    async def with_open_turn(i: int) -> None:
        async with open_turn(storage, ids_of("open_turn", i), scopes=scopes) as state:
            await bump(state, 1)

    async def with_run_turn(i: int) -> None:
        await run_turn(storage, ids_of("run_turn", i), bump, scopes=scopes)

    async def application(i: int) -> None:
        await app.process(incoming[i % POOL])

    return {
        "our parts only": parts,
        "+ storage contract": contract,
        "+ TurnState": turn_state,
        "+ open_turn": with_open_turn,
        "+ run_turn": with_run_turn,
        "AgentApplication (turns.py's row)": application,
    }


async def run(rounds: int, turns: int) -> None:
    ours = await layered()
    floor_turn, _ = await floor(SCENARIO)
    m365_turn, _ = await microsoft(SCENARIO)
    rows: dict[str, Turn] = {"floor (turns.py)": floor_turn, **ours, "M365 Agents SDK": m365_turn}
    for turn in rows.values():  # warm: every document read and written once
        for i in range(POOL):
            await turn(i)
    times: dict[str, list[float]] = {name: [] for name in rows}
    for number in range(rounds):
        order = list(rows.items())
        for name, turn in order if number % 2 == 0 else reversed(order):
            started = time.process_time()
            for i in range(turns):
                await turn(i)
            times[name].append((time.process_time() - started) / turns * 1e6)
    medians = {name: statistics.median(values) for name, values in times.items()}
    floor_us, m365_us = medians["floor (turns.py)"], medians["M365 Agents SDK"]
    print(f"\nA small state-only changed turn, layer by layer; CPU medians of {rounds} rounds")
    header = f"{'row':<36}{'us/turn':>9}{'added':>9}{'x floor':>9}{'M365 / it':>11}"
    print(header)
    print("-" * len(header))
    previous = None
    for name, us in medians.items():
        added = f"{us - previous:+.1f}" if previous is not None and name in ours else ""
        print(f"{name:<36}{us:>9.1f}{added:>9}{us / floor_us:>8.1f}x{m365_us / us:>10.1f}x")
        if name in ours:
            previous = us
    print("Targets (issue 16, the AgentApplication row): >= 10x the M365 SDK, <= 3x the floor.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--turns", type=int, default=4000)
    args = parser.parse_args()
    asyncio.run(run(args.rounds, args.turns))


if __name__ == "__main__":
    main()
