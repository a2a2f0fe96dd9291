"""Turns per second on Cosmos DB (the project's emulator, real azure-cosmos SDK over HTTP):
agent-state's `AgentApplication` vs the M365 Agents SDK's own Cosmos storage vs a raw-SDK floor.

- agent-state: `AgentApplication` on `open_storage("cosmos://...")`. Activities carry no
  id, as neither SDK then keeps a delivery record; the "with ids" rows send each with a
  fresh id, so a changed turn also saves its delivery record in the same transactional
  batch (it lives in the conversation's partition): what exactly-once costs, outside the
  targets.
- M365 Agents SDK: its `AgentApplication` on `CosmosDBStorage` (1.9), each turn a
  `TurnContext` on a stub adapter (no HTTP to a channel, typing timer off).
- Floor: the point reads and the conditional write of the same turn, by hand with the SDK:
  the four buckets a turn loads (user, conversation, session, app) read concurrently, then
  the conversation replaced with `If-Match` (the unchanged floor only reads). Its client
  gets the transport agent-state uses (no proxy/netrc lookups from the environment).

Every handler bumps (or, unchanged, only reads) a counter in conversation state and
replies. Turns run one after another over a pool of conversations, rounds interleaved (the
order reversed every other round); medians are printed with the emulator's item requests
per turn, and each ratio is the median of the rounds' own ratios, since the emulator
shares the machine's two cores with the client. Targets: agent-state at least 2x the M365
SDK and at least 80 % of the floor.

Run from the repository root: `.venv/bin/python benchmarks/cosmos.py [--turns N] [--rounds R]`.
It starts a private emulator (`python -m tests.cosmos_emulator`) on a free port and stops
it by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
from _support import (
    NoConnections,
    Sampled,
    StubAdapter,
    free_port,
    ms_get,
    ms_message,
    ms_set,
    round_order,
    server,
)
from azure.core import MatchConditions
from azure.core.pipeline.transport import AioHttpTransport
from azure.cosmos import PartitionKey, documents
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import CosmosResourceNotFoundError
from microsoft_agents.hosting import core as ms
from microsoft_agents.storage.cosmos import CosmosDBStorage, CosmosDBStorageConfig

from agent_state import AgentApplication, open_storage
from agent_state.backends import Storage

POOL = 50
CHANNEL = "bench"
NOTES = "lorem ipsum " * 60  # about 0.7 KB of conversation state
MS_SHARE, FLOOR_SHARE = 2.0, 0.8

Turn = Callable[[int], Awaitable[None]]


@dataclass
class Row(Sampled):
    system: str
    changed: bool
    turn: Turn
    samples: list[tuple[float, float]] = field(default_factory=list)


def ids(i: int) -> tuple[str, str]:
    return f"user-{i % POOL}", f"conversation-{i % POOL}"


# --- agent-state ----------------------------------------------------------------------------


def ours(storage: Storage, changed: bool, with_ids: bool = False) -> Turn:
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: Any, state: Any) -> None:
        count = state.get("conversation.count", 0)
        if changed:
            state["conversation:count"] = count + 1
            state["conversation:notes"] = NOTES
        await ctx.send(f"count {count}")

    async def turn(i: int) -> None:
        user, conversation = ids(i)
        await app.process(
            {
                "type": "message",
                **({"id": uuid.uuid4().hex} if with_ids else {}),
                "channelId": CHANNEL,
                "text": "hi",
                "from": {"id": user},
                "recipient": {"id": "bot"},
                "conversation": {"id": conversation},
            }
        )

    return turn


def with_ids(storage: Storage, changed: bool) -> Turn:
    """Ours with an id on every activity: the turn also saves its delivery record."""
    return ours(storage, changed, with_ids=True)


# --- Microsoft 365 Agents SDK ---------------------------------------------------------------


def microsoft(storage: CosmosDBStorage, changed: bool) -> Turn:
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=NoConnections(), start_typing_timer=False
    )
    adapter = StubAdapter()

    @app.activity("message")
    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = ms_get(state.conversation, "count", 0)
        if changed:
            ms_set(state.conversation, "count", count + 1)
            ms_set(state.conversation, "notes", NOTES)
        await ctx.send_activity(f"count {count}")

    async def turn(i: int) -> None:
        user, conversation = ids(i)
        activity = ms_message(CHANNEL, user, conversation, uuid.uuid4().hex)
        await app.on_turn(ms.TurnContext(adapter, activity))

    return turn


# --- the floor ------------------------------------------------------------------------------


def floor(container: ContainerProxy, changed: bool) -> Turn:
    """Four concurrent point reads, then (changed) one conditional replace."""

    async def read(item: str, pk: str) -> dict[str, Any] | None:
        try:
            return await container.read_item(item, pk)
        except CosmosResourceNotFoundError:
            return None

    async def turn(i: int) -> None:
        user, conversation = ids(i)
        pk = f"c-{conversation}"
        reads = await asyncio.gather(
            read(f"u-{user}", f"u-{user}"),
            read(pk, pk),
            read(f"{pk}-{user}", pk),
            read("app-bench", "app-bench"),
        )
        current = reads[1]
        if not changed:
            return
        data = {"count": (current or {"data": {"count": 0}})["data"]["count"] + 1, "notes": NOTES}
        body = {"id": pk, "pk": pk, "v": 1, "key": pk, "meta": {}, "data": data}
        if current is None:
            await container.create_item(body)
        else:
            await container.replace_item(
                pk, body, etag=current["_etag"], match_condition=MatchConditions.IfNotModified
            )

    return turn


# --- running --------------------------------------------------------------------------------


async def item_requests(http: aiohttp.ClientSession, endpoint: str) -> int:
    async with http.get(f"{endpoint}/_emulator/stats") as response:
        return int((await response.json())["item_requests"])


async def measure(row: Row, turns: int, http: aiohttp.ClientSession, endpoint: str) -> None:
    before = await item_requests(http, endpoint)
    start = time.perf_counter()
    for i in range(turns):
        await row.turn(i)
    elapsed = time.perf_counter() - start
    row.samples.append((turns / elapsed, (await item_requests(http, endpoint) - before) / turns))


async def run(endpoint: str, key: str, turns: int, rounds: int) -> bool:
    ours_storage = open_storage("cosmos://bench/agent-state", endpoint=endpoint, credential=key)
    policy = documents.ConnectionPolicy()
    policy.EnableEndpointDiscovery = False
    ms_storage = CosmosDBStorage(
        CosmosDBStorageConfig(
            cosmos_db_endpoint=endpoint,
            auth_key=key,
            database_id="bench",
            container_id="m365",
            cosmos_client_options={"connection_policy": policy},
        )
    )
    raw = CosmosClient(endpoint, key, transport=AioHttpTransport(use_env_settings=False))
    database = await raw.create_database_if_not_exists("bench")
    container = await database.create_container_if_not_exists(
        "floor", partition_key=PartitionKey("/pk"), default_ttl=-1
    )
    systems: list[tuple[str, Callable[[bool], Turn]]] = [
        ("raw SDK floor", partial(floor, container)),
        ("agent-state", partial(ours, ours_storage)),
        ("M365 Agents SDK", partial(microsoft, ms_storage)),
        ("agent-state, with ids", partial(with_ids, ours_storage)),
    ]
    rows = [
        Row(system, changed, make(changed)) for changed in (True, False) for system, make in systems
    ]
    try:
        async with aiohttp.ClientSession() as http:
            for row in rows:  # warm up: clients, containers, every document exists
                for i in range(2 * POOL):
                    await row.turn(i)
            for number in range(rounds):  # interleaved, so drift hits every row alike
                for row in round_order(rows, number):
                    await measure(row, turns, http, endpoint)
    finally:
        await ours_storage.close()
        await ms_storage._close()  # the SDK storage has no public close
        await raw.close()
    return report(rows, turns, rounds)


def report(rows: list[Row], turns: int, rounds: int) -> bool:
    print(
        f"Cosmos DB emulator over HTTP, azure-cosmos SDK: {turns} sequential turns per round,"
        f" median of {rounds} rounds (ratios: median of per-round ratios)\n"
    )
    print(f"{'turn':<34}{'turns/s':>9}{'requests/turn':>15}{'vs floor':>10}{'vs M365':>9}  target")
    met = True
    for changed in (True, False):
        by_system = {row.system: row for row in rows if row.changed == changed}
        floor_row, ms_row = by_system["raw SDK floor"], by_system["M365 Agents SDK"]
        for system, row in by_system.items():
            kind = "changed" if changed else "unchanged"
            vs_floor, vs_ms = row.ratio_to(floor_row), row.ratio_to(ms_row)
            line = (
                f"{system + ', ' + kind:<34}{row.turns_per_second:>9,.0f}"
                f"{row.requests_per_turn:>15.2f}{vs_floor:>10.0%}{vs_ms:>8.1f}x"
            )
            if system == "agent-state":
                ok = vs_ms >= MS_SHARE and vs_floor >= FLOOR_SHARE
                met &= ok
                line += f"  >= {MS_SHARE:g}x M365, >= {FLOOR_SHARE:.0%} floor: "
                line += "ok" if ok else "MISSED"
            print(line)
    return met


EMULATOR_KEY = "YmVuY2htYXJrIGVtdWxhdG9yIGtleSwgbm90IGEgc2VjcmV0"
"""The private emulator's master key (base64): a benchmark's own, not a secret."""


@contextmanager
def private_emulator() -> Iterator[tuple[str, str]]:
    """The test emulator on a free loopback port in its own process, stopped by its PID."""
    port = free_port()
    command = [sys.executable, "-m", "tests.cosmos_emulator", "--port", str(port)]
    with server(command + ["--key", EMULATOR_KEY], port, "the Cosmos DB emulator"):
        yield f"http://127.0.0.1:{port}", EMULATOR_KEY


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300, help="turns per round and row")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with private_emulator() as (endpoint, key):
        return 0 if asyncio.run(run(endpoint, key, args.turns, args.rounds)) else 1


if __name__ == "__main__":
    sys.exit(main())
