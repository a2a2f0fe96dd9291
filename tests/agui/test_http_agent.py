"""The example AG-UI server (examples/agui_server.py) under uvicorn, driven by the real
`HttpAgent` of @ag-ui/client 1.0.0: a thread of three runs with client edits between them
ends with the client holding exactly what the server stored, minus the server-only field."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_state import SessionState, TurnIds, open_turn, read_state, write_group
from agent_state.backends import FileStorage
from tests.agui.server_support import assert_valid_streams
from tests.agui.support import ROOT, client_dir
from tests.net import free_port, stop

SCRIPT = Path(__file__).with_name("http_agent_thread.mjs")
USER, THREAD = "ada", "release-thread"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The example app under uvicorn on a free port, its FileStorage in a temp folder."""
    folder, port = tmp_path_factory.mktemp("agui") / "state", free_port()
    env = {**os.environ, "AGENT_STATE_AGUI_DIR": str(folder)}
    command = [sys.executable, "-m", "uvicorn", "examples.agui_server:app",
               "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited: {process.communicate()[1]}")
            try:
                if httpx.get(url, timeout=1).status_code == 405:  # up: it serves POST only
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    pytest.fail("the server did not answer within 20 s")
                time.sleep(0.05)
        yield url, folder
    finally:
        stop(process)


async def _stored(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The thread's session bucket and history, read through the library."""
    storage = FileStorage(folder, write_group=write_group)
    ids = TurnIds("agui", USER, THREAD)
    session = await read_state(storage, SessionState, ids)
    async with open_turn(storage, ids) as turn:
        turn.discard()
        history = await turn.history.first(await turn.history.count())
    await storage.close()
    return dict(session.data), history


def test_http_agent_thread_ends_with_what_the_server_stored(server: tuple[str, Path]) -> None:
    url, folder = server
    done = subprocess.run(
        ["node", str(SCRIPT), str(client_dir()), url, USER, THREAD],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    client = json.loads(done.stdout)
    assert client["errors"] == []
    session, history = asyncio.run(_stored(folder))

    assert client["state"] == {"steps": session["steps"]}, "the client holds the stored plan"
    assert client["messages"] == history, "and the thread's stored history"
    assert session["steps"] == [
        {"title": "write the notes", "status": "done"},
        {"title": "tag v1.0", "status": "done"},  # renamed by the client, kept by the server
        {"title": "announce it", "status": "doing"},
        {"title": "celebrate", "status": "todo"},  # added by the client
    ]
    assert [m["role"] for m in history] == ["user", "assistant"] * 3
    assert [m["id"] for m in history[::2]] == ["user-1", "user-2", "user-3"]
    assert history[-1]["content"] == "2/4 done; now working on 'announce it'."

    assert session["runs"] == 3, "the server-only counter is stored"
    for run in client["runs"]:
        assert set(run["state"]) == {"steps"}, "and never sent"
        for event in run["events"]:
            if event["type"] == "STATE_SNAPSHOT":
                assert set(event["snapshot"]) == {"steps"}
            if event["type"] == "STATE_DELTA":
                assert all(op["path"].startswith("/steps/") for op in event["delta"])
        types = [event["type"] for event in run["events"]]
        assert types[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
        assert types[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        assert "STATE_DELTA" in types
    # the events as HttpAgent received them, framed again as SSE, pass the validator
    assert_valid_streams(
        [b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in run["events"])
         for run in client["runs"]]
    )  # fmt: skip


def test_the_thread_belongs_to_its_first_user(server: tuple[str, Path]) -> None:
    url, _ = server
    body = {"threadId": "owned-thread", "runId": "r1", "state": {}, "messages": [], "tools": [],
            "context": [], "forwardedProps": {}}  # fmt: skip
    assert httpx.post(url, json=body, headers={"X-User": USER}).status_code == 200
    other = httpx.post(url, json={**body, "runId": "r2"}, headers={"X-User": "grace"})
    assert other.status_code == 403, other.text
    assert httpx.post(url, json=body).status_code == 401
