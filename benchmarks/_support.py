"""What several benchmarks share: private servers started and stopped by PID, and the stubs
that drive the Microsoft 365 Agents SDK's AgentApplication without a channel."""

from __future__ import annotations

import asyncio
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from azure.core.pipeline.transport import AioHttpTransport
from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting.core import (
    AccessTokenProviderBase,
    AgentAuthConfiguration,
    ClaimsIdentity,
    Connections,
)
from microsoft_agents.hosting.core import AgentState as MsAgentState
from microsoft_agents.hosting.core.channel_adapter import ChannelAdapter

from agent_state import Activity
from agent_state._delivery import EVIDENCE_LIMIT, RETENTION_SECONDS
from agent_state._seal import fingerprint, seal

R = TypeVar("R")
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def server(command: list[str], port: int, name: str, timeout: float = 15.0) -> Iterator[None]:
    """Run `command` (a server on `port`) for the block; stop it by its PID after."""
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not start") from None
                time.sleep(0.02)  # polling a server that is starting
        yield
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def redis_server(url: str | None = None) -> Iterator[str]:
    """`url` when given; else a throwaway redis-server on a free loopback port, stopped by its
    PID when the block ends."""
    if url:
        yield url
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        command = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
        command += ["--appendonly", "no", "--dir", folder]
        with server(command, port, "redis-server"):
            yield f"redis://127.0.0.1:{port}/0"


def message(i: int) -> Activity:
    """Message `i` of a benchmark's pool: `user-i` in conversation `conv-i` on channel
    `bench`, without an id (a repeated id would be a redelivery, which is not applied)."""
    return Activity(
        channel_id="bench",
        from_={"id": f"user-{i}"},
        recipient={"id": "bot"},
        conversation={"id": f"conv-{i}"},
        text="hi",
    )


EVIDENCE = "~applied"
"""The floors' reserved member for delivery evidence: activity id -> [digest, time, sealed
reply texts]."""


def unapplied(activity_id: str, documents: Iterable[Mapping[str, Any]]) -> bool:
    """A floor's redelivery check: whether none of the documents a turn read carries
    evidence of `activity_id` (the evidence travels inside them, so one read finds it)."""
    return not any(activity_id in document.get(EVIDENCE, ()) for document in documents)


def keep_evidence(
    document: dict[str, Any],
    activity_id: str,
    wire: Mapping[str, Any],
    replies: list[str],
    now: float,
) -> None:
    """Record in `document` (which the turn writes anyway) that `activity_id` was applied,
    with what our exactly-once guarantees need of an entry, so every floor keeps what ours
    does: a SHA-256 of the activity's whole JSON form `wire` (the same id with other content
    is a conflict, and a hostile sender cannot make another activity pass for a
    redelivery), the time it was made (`now`, for the retention window) and the reply texts
    (if any) sealed with a key from the same bytes (the entry names no one, so a shared bucket keeps
    nothing of a forgotten user); the newest `EVIDENCE_LIMIT` entries (our bound), entries
    past `RETENTION_SECONDS` dropped from the front (oldest first)."""
    printed = fingerprint(wire)
    applied = document.setdefault(EVIDENCE, {})
    applied[activity_id] = [printed.digest, now, seal(printed.key, replies) if replies else []]
    while True:  # the newest entry is live, so this ends
        oldest = next(iter(applied))
        if len(applied) <= EVIDENCE_LIMIT and applied[oldest][1] + RETENTION_SECONDS > now:
            break
        del applied[oldest]


def wire_of(activity: Activity) -> dict[str, Any]:
    """An activity's JSON form, as the framework checks and digests it."""
    return activity.model_dump(mode="json", by_alias=True, exclude_none=True)


def ms_message(
    channel: str, user: str, conversation: str, activity_id: str | None = None
) -> ms_activity.Activity:
    """A message activity "hi" for the M365 SDK, from `user` in `conversation`."""
    return ms_activity.Activity(
        type="message",
        id=activity_id,
        channel_id=channel,
        service_url="http://localhost",
        from_property=ms_activity.ChannelAccount(id=user),
        recipient=ms_activity.ChannelAccount(id="bot"),
        conversation=ms_activity.ConversationAccount(id=conversation),
        text="hi",
    )


class RequestCount:
    """HTTP requests sent through any azure-core aiohttp transport in this process (the
    Blob and Cosmos DB SDKs', ours and the M365 SDK's alike), each delayed by `rtt` seconds
    first: a network's round trip, modelled (concurrent requests overlap)."""

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


class Sampled:
    """A benchmark row's rounds, each `(turns per second, requests per turn)`, and their
    medians (subclasses are dataclasses with a `samples` list)."""

    samples: list[tuple[float, float]]

    @property
    def turns_per_second(self) -> float:
        return statistics.median(s[0] for s in self.samples)

    @property
    def requests_per_turn(self) -> float:
        return statistics.median(s[1] for s in self.samples)

    def ratio_to(self, other: Sampled) -> float:
        """The median over rounds of this row's turns/s over `other`'s in the same round:
        a slow spell of the shared machine or the server hits both sides of each ratio."""
        pairs = zip(self.samples, other.samples, strict=True)
        return statistics.median(mine[0] / theirs[0] for mine, theirs in pairs)


def install_revision(rev: str, into: Path) -> Path:
    """`rev` of this repository, installed (without dependencies) into `into`: put the path
    it returns first on PYTHONPATH to run that version instead of this tree."""
    source = into / "source"
    source.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    target = into / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "--target", str(target), str(source)], check=True)
    return target


def round_order(rows: list[R], number: int) -> list[R]:
    """The rows in the order round `number` runs them: reversed every other round, so no
    row always runs right after the same one."""
    return rows if number % 2 == 0 else rows[::-1]


class StubAdapter(ChannelAdapter):
    """Keeps sent activities on the turn instead of posting them to a channel."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # the SDK's __init__: no annotation

    async def send_activities(self, context, activities):  # type: ignore[no-untyped-def]
        context.turn_state.setdefault("replies", []).extend(activities)
        return [ms_activity.ResourceResponse(id=str(i)) for i in range(len(activities))]

    async def update_activity(self, context, activity):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    async def delete_activity(self, context, reference):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class NoConnections(Connections):
    """A connection manager for an app without OAuth routes (never called)."""

    def get_connection(self, connection_name: str) -> AccessTokenProviderBase:
        raise NotImplementedError

    def get_default_connection(self) -> AccessTokenProviderBase:
        raise NotImplementedError

    def get_token_provider(
        self, claims_identity: ClaimsIdentity, service_url: str
    ) -> AccessTokenProviderBase:
        raise NotImplementedError

    def get_token_provider_from_activity(
        self, claims_identity: ClaimsIdentity, activity: ms_activity.Activity
    ) -> AccessTokenProviderBase:
        raise NotImplementedError

    def get_default_connection_configuration(self) -> AgentAuthConfiguration:
        raise NotImplementedError


def ms_get(bucket: MsAgentState, name: str, default: T) -> T:
    """`bucket.get_value(name, factory)`: the SDK annotates a value as StoreItem, but a
    property holds any JSON value, so the caller names its type by the default."""

    def factory() -> Any:
        return default

    found: Any = bucket.get_value(name, factory)
    return cast(T, found)


def ms_set(bucket: MsAgentState, name: str, value: object) -> None:
    """`bucket.set_value(name, value)` for any JSON value (the SDK annotates StoreItem)."""
    stored: Any = value
    bucket.set_value(name, stored)
