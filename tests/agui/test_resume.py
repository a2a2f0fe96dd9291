"""Runs that outlive their connection, over real HTTP (uvicorn on a free port) on memory, file
and Redis: a client that drops a run's stream after 1,000 events reconnects with
`Last-Event-ID` and receives the rest and the live tail, no event lost or repeated (checked
by id); the dropped connection did not cancel the run, which completes and reads back through
the thread service; the real npm `@ag-ui/client` decodes the resumed stream identically."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from pydantic import BaseModel
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from agent_state import open_storage
from agent_state.agui import AgentRun, AGUIEndpoint
from agent_state.backends import Storage
from tests.agui.support import client_dir
from tests.stores import STORES

SCRIPT = Path(__file__).with_name("resume_events.mjs")
FIRST, LATER = 1_000, 500
"""State changes the agent streams before the client drops the run, and after it is back."""


class Counter(BaseModel):
    count: int = 0


class Served:
    """The endpoint as an ASGI app whose storage lives in the server's own event loop: opened
    at startup, closed at shutdown. The agent streams FIRST deltas, waits until `resumed` is
    set (a client reconnected), then LATER more."""

    def __init__(self, url: str) -> None:
        self.url, self.resumed = url, threading.Event()
        self.storage: Storage | None = None
        self.endpoint: AGUIEndpoint[Counter] | None = None

    async def agent(self, run: AgentRun[Counter]) -> None:
        for _ in range(FIRST):
            run.state.count += 1
            await run.sync()
        if not await asyncio.to_thread(self.resumed.wait, 60):
            raise RuntimeError("no client came back within a minute")
        for _ in range(LATER):
            run.state.count += 1
            await run.sync()
        await run.say(f"counted to {run.state.count}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            self.storage = open_storage(self.url)
            self.endpoint = AGUIEndpoint(self.agent, storage=self.storage, state=Counter,
                                         authenticate=_user)  # fmt: skip
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await self.storage.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert self.endpoint is not None
        await self.endpoint(scope, receive, send)


def _user(request: Request) -> str | None:
    return request.headers.get("x-user")


@pytest.fixture(params=["memory", "file", "redis"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Served]]:
    """uvicorn serving a fresh `Served` on a free port, in a thread of its own."""
    app = Served(STORES[request.param](str(tmp_path)))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:  # startup is observable only by polling uvicorn's flag
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        app.resumed.set()  # a failed test must not leave the agent waiting
        server.should_exit = True
        thread.join(timeout=30)


def frames(raw: bytes) -> list[tuple[int, dict[str, Any]]]:
    """The (id, event) of every complete SSE frame of `raw` (the server writes LF only)."""
    found = []
    for frame in raw.split(b"\n\n")[:-1]:
        fields = dict(line.split(b": ", 1) for line in frame.split(b"\n"))
        found.append((int(fields[b"id"]), orjson.loads(fields[b"data"])))
    return found


def run_input() -> bytes:
    message = {"id": "u1", "role": "user", "content": "count"}
    return orjson.dumps({"threadId": "t1", "runId": "r1", "state": {}, "tools": [],
                         "context": [], "forwardedProps": {}, "messages": [message]})  # fmt: skip


async def test_a_reconnect_after_1000_events_resumes_with_no_event_lost_or_repeated_and_a_dropped_connection_does_not_cancel_the_run(  # noqa: E501
    served: tuple[str, Served],
) -> None:
    url, app = served
    user = {"x-user": "ada", "accept": "text/event-stream"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        first = bytearray()
        async with http.stream("POST", "/", content=run_input(), headers=user) as response:
            assert response.status_code == 200 and response.headers["x-run-id"] == "r1"
            async for chunk in response.aiter_bytes():
                first += chunk
                if first.count(b"\n\n") >= FIRST + 2:  # RUN_STARTED, a snapshot, the deltas
                    break  # the client goes away with the agent mid-run (it waits for a reconnect)
        before = frames(bytes(first[: first.rindex(b"\n\n") + 2]))
        last = before[-1][0]
        assert last >= FIRST + 2 and [number for number, _ in before] == list(range(1, last + 1))

        path = "/threads/t1/runs/r1/events"
        headers = {**user, "last-event-id": str(last)}
        async with http.stream("GET", path, headers=headers) as tail:
            assert tail.status_code == 200
            assert tail.headers["content-type"].startswith("text/event-stream")
            app.resumed.set()  # the agent goes on only now: the rest comes live
            rest = frames(b"".join([chunk async for chunk in tail.aiter_bytes()]))
        ids = [number for number, _ in before + rest]
        assert ids == list(range(1, len(ids) + 1))  # none lost, none repeated
        events = [event for _, event in before + rest]
        assert [e["type"] for e in events[:2]] == ["RUN_STARTED", "STATE_SNAPSHOT"]
        assert [e["type"] for e in events].count("STATE_DELTA") == FIRST + LATER
        assert events[-1]["type"] == "RUN_FINISHED"

        thread = (await http.get("/threads/t1", headers=user)).json()
        assert thread["state"] == {"count": FIRST + LATER}
        assert [(r["runId"], r["status"]) for r in thread["runs"]] == [("r1", "completed")]
        assert thread["messages"][-1]["content"] == f"counted to {FIRST + LATER}"
        refused = await http.get(path, headers={**headers, "x-user": "bob"})
        assert refused.status_code == 403

    command = ["node", str(SCRIPT), str(client_dir()), url + path, "ada", str(last)]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True,
                                   timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    decoded = json.loads(done.stdout)
    assert decoded["error"] is None
    assert [event["type"] for event in decoded["events"]] == [e["type"] for _, e in rest]
    deltas = [e["delta"] for e in decoded["events"] if e["type"] == "STATE_DELTA"]
    assert deltas == [e["delta"] for _, e in rest if e["type"] == "STATE_DELTA"]
