"""Turns per second on Azure Blob (Azurite): agent-state vs the M365 Agents SDK vs a floor.

Every system runs the same message turn over a pool of conversations (one user each), on a
route that uses two scopes, user and conversation, and changes one: the handler bumps a
counter in conversation state and sends a reply.

- agent-state, ids: `AgentApplication` on `open_storage("azure-blob://...")`, each activity
  with a fresh id, as real channels send them: the turn keeps its delivery evidence
  (exactly once). The route declares its two scopes (`scopes=`), so the turn reads only
  those. The "no ids" row sends none (labelled; outside the targets).
- M365 Agents SDK: its `AgentApplication` on its own blob storage
  (`microsoft-agents-storage-blob`), each turn a `TurnContext` on a stub adapter, given the
  same activities. It loads conversation and user state one after the other and writes
  unconditionally (`overwrite=True`): no optimistic concurrency, no exactly-once.
- floor: the minimal design of our turn with an id, on the same SDK: concurrent GETs of the
  two used buckets (the delivery evidence travels inside them), then one If-Match PUT of
  the conversation carrying the evidence.

HTTP requests are counted at the SDK's aiohttp transport, for every system alike; the same
hook delays each request by a modelled network round trip (`--rtt-ms`, default 0 and 10):
on loopback the emulator's and the SDK's per-request CPU dominate, against a real account
the round trips do. Rounds are interleaved (the order reversed every other round); a ratio
is the median of the rounds' own ratios. Targets (issue 23): agent-state with ids >= 1.8x
the M365 SDK at 10 ms, >= 1.3x on loopback.

Run from the repository root: `.venv/bin/python benchmarks/blob.py [--turns N] [--rounds R]`.
Without `--connection-string` (or `$AGENT_STATE_AZURITE_CONNECTION_STRING`) it starts a
private Azurite on a free port and stops it by its PID at the end.
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

import orjson
from _support import (
    ROOT,
    NoConnections,
    RequestCount,
    Sampled,
    StubAdapter,
    free_port,
    keep_evidence,
    ms_get,
    ms_set,
    round_order,
    server,
    unapplied,
)
from azure.core import MatchConditions
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob.aio import BlobClient, BlobServiceClient, ContainerClient
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.storage.blob import BlobStorage as MsBlobStorage
from microsoft_agents.storage.blob import BlobStorageConfig

from agent_state import AgentApplication, conversation_key, open_storage, user_key
from agent_state.backends import Storage, wrap
from agent_state.backends._envelope import dump_data
from agent_state.backends.blob.names import blob_name

CONVERSATIONS = 50
CHANNEL = "bench"
NOTES = "lorem ipsum " * 60  # about 0.7 KB of conversation state
TARGETS = {0.0: 1.3, 10.0: 1.8}
"""agent-state with ids over the M365 SDK, at least, per modelled round trip (ms)."""
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

Turn = Callable[[int], Awaitable[None]]


def ids(i: int) -> tuple[str, str]:
    return f"user-{i % CONVERSATIONS}", f"conversation-{i % CONVERSATIONS}"


def activity(i: int, with_id: bool = True) -> dict[str, Any]:
    """Turn `i`'s activity, with a fresh id unless `with_id` is false."""
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


def ours(storage: Storage, with_ids: bool) -> Turn:
    app = AgentApplication(storage, app_name="bench")

    @app.message(scopes=("user", "conversation"))
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
    """Concurrent GETs of the two used buckets (user, conversation), the redelivery check on
    what they hold, then one If-Match PUT of the conversation with the evidence in it."""
    etags: dict[str, str] = {}
    blobs: dict[str, BlobClient] = {}

    def blob(name: str) -> BlobClient:
        if name not in blobs:
            blobs[name] = container.get_blob_client(name)
        return blobs[name]

    async def get(name: str) -> dict[str, Any] | None:
        try:
            download = await blob(name).download_blob()
        except ResourceNotFoundError:
            return None
        etags[name] = str(download.properties.etag)
        envelope: dict[str, Any] = orjson.loads(await download.readall())
        return envelope

    async def turn(i: int) -> None:
        user, conversation = ids(i)
        incoming = activity(i)
        keys = [user_key(CHANNEL, user), conversation_key(CHANNEL, conversation)]
        names = [blob_name(key) for key in keys]
        found = await asyncio.gather(*(get(name) for name in names))
        documents = [envelope["data"] for envelope in found if envelope is not None]
        if not unapplied(incoming["id"], documents):
            raise AssertionError("a fresh id was found applied")
        stored = found[1]
        data = dict(stored["data"]) if stored is not None else {}
        count = data.get("count", 0) + 1
        data.update(count=count, notes=NOTES)
        keep_evidence(data, incoming["id"], incoming, [f"count {count}"], time.time())
        body = wrap(keys[1], dump_data(keys[1], data))
        condition: dict[str, Any] = {"overwrite": False}
        if stored is not None:
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
            Row("floor (2 GETs || + 1 PUT), ids", floor(floor_container)),
            Row("agent-state, ids", ours(ours_storage, with_ids=True)),
            Row("M365 Agents SDK", microsoft(ms_storage)),
            Row("agent-state, no ids", ours(ours_storage, with_ids=False)),
        ]
        for row in rows:  # warm up: connections, and every conversation's state exists
            for i in range(CONVERSATIONS):
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
    """The table at one modelled round trip and its target line; whether it was met."""
    floor_row, ours_row, ms_row, _ = rows
    network = f"+ {rtt:g} ms modelled round trip per request" if rtt else "on loopback"
    print(
        f"Azure Blob, Azurite {network}: {turns} sequential turns per round, median of {rounds}"
        " (ratios: median of per-round ratios); a route using user + conversation, changing one"
    )
    print(f"{'system':<34}{'turns/s':>10}{'HTTP req/turn':>15}{'ours, ids / it':>16}")
    for row in rows:
        ratio = "" if row is ours_row else f"{ours_row.ratio_to(row):.2f}x"
        print(
            f"{row.name:<34}{row.turns_per_second:>10,.1f}{row.requests_per_turn:>15.2f}{ratio:>16}"
        )
    vs_ms = ours_row.ratio_to(ms_row)
    target = TARGETS.get(rtt)
    if target is None:
        print(f"\n(no target at {rtt:g} ms; of the floor: {ours_row.ratio_to(floor_row):.0%})\n")
        return True
    met = vs_ms >= target
    print(
        f"\nTarget: agent-state with ids >= {target:g}x the M365 SDK {network}: {vs_ms:.2f}x "
        f"{'met' if met else 'NOT met'} (of the floor: {ours_row.ratio_to(floor_row):.0%})\n"
    )
    return met


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
    parser.add_argument("--turns", type=int, default=30, help="turns per round and system")
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
