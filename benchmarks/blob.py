"""Turns per second on Azure Blob (Azurite): agent-state vs the M365 Agents SDK vs a raw-SDK floor.

Every system runs the same message turn over a pool of conversations (one user each): the
handler bumps a counter in conversation state and sends a reply.

- agent-state: `AgentApplication` on `open_storage("azure-blob://...")`. Activities carry
  no id, as neither SDK then keeps a delivery record; the last row sends each with a fresh
  id, so our turn also saves its delivery record, all-or-nothing with the conversation (a
  commit through intents on Blob): what exactly-once delivery costs, not a comparison.
- Microsoft 365 Agents SDK: its `AgentApplication` on its own blob storage
  (`microsoft-agents-storage-blob`), each turn a `TurnContext` on a stub adapter.
- raw floor: the HTTP our turn needs and nothing else, on the same SDK: concurrent GETs of
  the blobs a turn loads (user, conversation, session, app), then one If-Match PUT.

HTTP requests are counted at the SDK's aiohttp transport, for every system alike; the same
hook can delay each request by a modelled network round trip (`--rtt-ms`): on loopback the
emulator's and the SDK's per-request CPU dominate, against a real account the round trips do.
Run from the repository root: `.venv/bin/python benchmarks/blob.py [--turns N] [--rounds R]`.
Without `--connection-string` (or `$AGENT_STATE_AZURITE_CONNECTION_STRING`) it starts a
private Azurite on a free port and stops it by its PID at the end.
Targets: >= 2x the M365 SDK's turns/s and >= 80% of the floor's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _support import (
    ROOT,
    NoConnections,
    Sampled,
    StubAdapter,
    free_port,
    ms_get,
    ms_set,
    round_order,
    server,
)
from azure.core import MatchConditions
from azure.core.exceptions import ResourceNotFoundError
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.blob.aio import BlobClient, BlobServiceClient, ContainerClient
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.storage.blob import BlobStorage as MsBlobStorage
from microsoft_agents.storage.blob import BlobStorageConfig

from agent_state import (
    AgentApplication,
    app_key,
    conversation_key,
    open_storage,
    session_key,
    user_key,
)
from agent_state.backends import Storage, wrap
from agent_state.backends._envelope import dump_data
from agent_state.backends.blob.names import blob_name

CONVERSATIONS = 50
CHANNEL = "bench"
NOTES = "lorem ipsum " * 60  # about 0.7 KB of conversation state
TARGET_VS_MICROSOFT = 2.0
TARGET_VS_FLOOR = 0.8
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

Turn = Callable[[int], Awaitable[None]]


class RequestCount:
    """HTTP requests sent through any azure-core aiohttp transport in this process, each
    delayed by `rtt` seconds first (a network's round trip; concurrent requests overlap)."""

    sent = 0
    rtt = 0.0

    @classmethod
    def install(cls) -> None:
        send = AioHttpTransport.send

        async def counting_send(self: AioHttpTransport, request: Any, **kwargs: Any) -> Any:
            cls.sent += 1
            if cls.rtt:
                await asyncio.sleep(cls.rtt)  # the modelled network, not synchronization
            return await send(self, request, **kwargs)

        AioHttpTransport.send = counting_send


def ids(i: int) -> tuple[str, str]:
    return f"user-{i % CONVERSATIONS}", f"conversation-{i % CONVERSATIONS}"


def activity(i: int, with_id: bool = False) -> dict[str, Any]:
    """Turn `i`'s activity: without an id, as the M365 SDK needs none (no delivery record is
    kept), or with a fresh one (agent-state then saves its delivery record in the turn)."""
    user, conversation = ids(i)
    return {
        "type": "message",
        **({"id": uuid.uuid4().hex} if with_id else {}),
        "channelId": CHANNEL,
        "serviceUrl": "http://localhost",
        "text": "hi",
        "from": {"id": user},
        "recipient": {"id": "bot"},
        "conversation": {"id": conversation},
    }


# --- agent-state ---------------------------------------------------------------------------


def ours(storage: Storage, with_ids: bool = False) -> Turn:
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: Any, state: Any) -> None:
        count = state.get("conversation.count", 0) + 1
        state["conversation:count"] = count
        state["conversation:notes"] = NOTES
        await ctx.send(f"count {count}")

    async def turn(i: int) -> None:
        await app.process(activity(i, with_ids))

    return turn


# --- Microsoft 365 Agents SDK --------------------------------------------------------------


def microsoft(storage: MsBlobStorage) -> Turn:
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=NoConnections(), start_typing_timer=False
    )
    adapter = StubAdapter()

    @app.activity("message")
    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = ms_get(state.conversation, "count", 0) + 1
        ms_set(state.conversation, "count", count)
        ms_set(state.conversation, "notes", NOTES)
        await ctx.send_activity(f"count {count}")

    async def turn(i: int) -> None:
        incoming = ms_activity.Activity.model_validate(activity(i))
        await app.on_turn(ms.TurnContext(adapter, incoming))

    return turn


# --- the raw-SDK floor ---------------------------------------------------------------------


def floor(container: ContainerClient) -> Turn:
    """Concurrent GETs of the blobs a turn loads (user, conversation, session, app state), then
    one If-Match PUT of the conversation."""
    etags: dict[str, str] = {}
    blobs: dict[str, BlobClient] = {}

    def blob(name: str) -> BlobClient:
        if name not in blobs:
            blobs[name] = container.get_blob_client(name)
        return blobs[name]

    async def get(name: str) -> bytes | None:
        try:
            download = await blob(name).download_blob()
        except ResourceNotFoundError:
            return None
        etags[name] = str(download.properties.etag)
        return await download.readall()

    async def turn(i: int) -> None:
        user, conversation = ids(i)
        keys = [
            user_key(CHANNEL, user),
            conversation_key(CHANNEL, conversation),
            session_key(CHANNEL, conversation, user),
            app_key("bench"),
        ]
        names = [blob_name(key) for key in keys]
        await asyncio.gather(*(get(name) for name in names))
        body = wrap(keys[1], dump_data(keys[1], {"count": i, "notes": NOTES}))
        condition: dict[str, Any] = {"overwrite": False}
        if names[1] in etags:
            condition = {"etag": etags[names[1]], "match_condition": MatchConditions.IfNotModified}
        result = await blob(names[1]).upload_blob(body, **condition)
        etags[names[1]] = str(result["etag"])

    return turn


# --- driver --------------------------------------------------------------------------------


@dataclass
class Row(Sampled):
    name: str
    turn: Turn
    samples: list[tuple[float, float]] = field(default_factory=list)


async def measure(row: Row, turns: int) -> None:
    RequestCount.sent = 0
    start = time.perf_counter()
    for i in range(turns):
        await row.turn(i)
    elapsed = time.perf_counter() - start
    row.samples.append((turns / elapsed, RequestCount.sent / turns))


async def run(connection_string: str, turns: int, rounds: int, rtts: list[float]) -> bool:
    RequestCount.install()
    tag = uuid.uuid4().hex[:12]
    names = {system: f"bench-{system}-{tag}" for system in ("ours", "ms", "floor")}
    service = BlobServiceClient.from_connection_string(connection_string)
    ours_storage = open_storage(
        f"azure-blob://{names['ours']}", connection_string=connection_string
    )
    ms_storage = MsBlobStorage(
        BlobStorageConfig(container_name=names["ms"], connection_string=connection_string)
    )
    floor_container = service.get_container_client(names["floor"])
    try:
        await ms_storage.initialize()
        await floor_container.create_container()
        rows = [
            Row("raw SDK floor (4 GETs || + 1 PUT)", floor(floor_container)),
            Row("agent-state AgentApplication", ours(ours_storage)),
            Row("M365 Agents SDK AgentApplication", microsoft(ms_storage)),
            Row("agent-state, activities with ids", ours(ours_storage, with_ids=True)),
        ]
        for row in rows:  # warm up: connections, and every conversation's state exists
            for i in range(2 * CONVERSATIONS):
                await row.turn(i)
        all_met = True
        for rtt in rtts:
            RequestCount.rtt = rtt / 1000
            for row in rows:
                row.samples.clear()
            for number in range(rounds):  # interleaved, so drift hits every row alike
                for row in round_order(rows, number):
                    await measure(row, turns)
            all_met &= report(turns, rounds, rtt, rows)
    finally:
        await ours_storage.close()
        await ms_storage._close()  # the SDK's storage has no public close
        for name in names.values():  # a container the run never got to create is missing
            with suppress(ResourceNotFoundError):
                await service.get_container_client(name).delete_container()
        await service.close()
    return all_met


def report(turns: int, rounds: int, rtt: float, rows: list[Row]) -> bool:
    floor_row, ours_row, ms_row, ids_row = rows
    network = f"+ {rtt:g} ms modelled round trip per request" if rtt else "on loopback"
    print(
        f"Azure Blob, Azurite {network}: {turns} sequential turns per round, median of {rounds}"
        " (ratios: median of per-round ratios)"
    )
    print(f"{'system':<36}{'turns/s':>10}{'HTTP req/turn':>15}{'ours / it':>11}")
    for row in rows:
        ratio = "" if row in (ours_row, ids_row) else f"{ours_row.ratio_to(row):.2f}x"
        print(
            f"{row.name:<36}{row.turns_per_second:>10,.1f}{row.requests_per_turn:>15.2f}{ratio:>11}"
        )
    vs_ms, vs_floor = ours_row.ratio_to(ms_row), ours_row.ratio_to(floor_row)
    met_ms, met_floor = vs_ms >= TARGET_VS_MICROSOFT, vs_floor >= TARGET_VS_FLOOR
    print(
        f"\nTargets: >= {TARGET_VS_MICROSOFT:.0f}x the M365 SDK: {vs_ms:.2f}x "
        f"({'met' if met_ms else 'MISSED'}); >= {TARGET_VS_FLOOR:.0%} of the floor: "
        f"{vs_floor:.0%} ({'met' if met_floor else 'MISSED'})"
    )
    print()
    return met_ms and met_floor


def azurite_main() -> Path:
    return Path(
        os.environ.get("AGENT_STATE_AZURITE_MAIN")
        or ROOT / ".test-npm/azurite/node_modules/azurite/dist/src/blob/main.js"
    )


@contextmanager
def private_azurite() -> Iterator[str]:
    """A throwaway in-memory Azurite on a free loopback port, stopped by its PID."""
    main = azurite_main()
    if not main.is_file():
        raise SystemExit(f"Azurite is not installed at {main} (bash tests/run.sh installs it)")
    port = free_port()
    command = ["node", str(main), "--blobHost", "127.0.0.1", "--blobPort", str(port)]
    command += ["--inMemoryPersistence", "--silent", "--disableTelemetry", "--skipApiVersionCheck"]
    with server(command, port, "Azurite", timeout=30):
        yield (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={DEV_KEY};BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--connection-string",
        default=os.environ.get("AGENT_STATE_AZURITE_CONNECTION_STRING"),
        help="an Azurite or account connection string (default: a private Azurite)",
    )
    parser.add_argument("--turns", type=int, default=200, help="turns per round and system")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--rtt-ms",
        default="0,10",
        help="comma-separated network round trips to model per request, one table each "
        "(default 0,10: loopback, and a nearby Azure region)",
    )
    args = parser.parse_args()
    rtts = [float(value) for value in args.rtt_ms.split(",")]
    if args.connection_string:
        met = asyncio.run(run(args.connection_string, args.turns, args.rounds, rtts))
    else:
        with private_azurite() as connection_string:
            met = asyncio.run(run(connection_string, args.turns, args.rounds, rtts))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
