"""The turn history checker: random concurrent turns, invariants that fail on any anomaly.

Turns of six kinds run concurrently in three OS processes (in one, on memory), some
delivered twice: counters in two buckets, an append-only log, the write-skew pair
`a + b >= 1`, a derived member `b == 2 * a`, and transfers between a user's balance and a
conversation's pot. Afterwards the stored state must equal what the applied turns add up
to, with no turn failing for contention. It runs on every backend; on each but standalone
Redis it also injects faults: writes failing after the first key of their batch (the
activity is redelivered) and one process killed in the middle of a write, whose unfinished
activities are then redelivered, as a channel would, to a fresh process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from agent_state import _lifecycle as lifecycle
from agent_state import conversation_key, open_storage, session_key, user_key
from agent_state.backends import MemoryStorage, Storage
from tests.state.history.worker import (
    CONVERSATIONS,
    KILLED,
    USERS,
    application,
    deliver,
    report_merges,
    run,
)
from tests.stores import SHARED, STORES

TURNS = 60
WORKER = "tests.state.history.worker"
"""The worker module each process runs."""
PROCESSES = 3
IO_FAULT_RATE = 0.05
DIE_AT_WRITE = 25


async def check(storage: Storage, lines: list[dict[str, Any]]) -> None:
    """Every activity begun was applied exactly once: the stored state says so."""
    activities = {line["activity"]["id"]: line["activity"] for line in lines if "activity" in line}
    attempts = {line["done"]: line["attempt"] for line in lines if "done" in line}
    assert set(attempts) == set(activities), "an activity was never done"
    applied: Counter[str] = Counter()
    logged: dict[str, list[str]] = {c: [] for c in CONVERSATIONS}
    for token, activity in activities.items():
        kind = activity["text"].split()[0]
        conversation = activity["conversation"]["id"]
        applied[f"{kind}/{activity['from']['id']}/{conversation}"] += 1
        if kind == "log":
            logged[conversation].append(token)
    keys = [user_key("h", u) for u in USERS] + [conversation_key("h", c) for c in CONVERSATIONS]
    keys += [session_key("h", c, u, agent="history") for c in CONVERSATIONS for u in USERS]
    found = await storage.read(keys)

    def doc(key: str) -> dict[str, Any]:
        return found[key].value if key in found else {}

    def turns(kind: str, *, user: str = "", conversation: str = "") -> int:
        return sum(
            n
            for name, n in applied.items()
            if name.startswith(f"{kind}/")
            and (not user or name.split("/")[1] == user)
            and (not conversation or name.split("/")[2] == conversation)
        )

    total = 0
    for c in CONVERSATIONS:
        conversation = doc(conversation_key("h", c))
        assert conversation.get("count", 0) == turns("count", conversation=c)
        assert sorted(conversation.get("log", [])) == sorted(logged[c])  # each exactly once
        assert conversation.get("a", 1) + conversation.get("b", 1) >= 1  # no write skew
        assert conversation.get("pot", 0) == turns("transfer", conversation=c)
        total += conversation.get("pot", 0)
        for u in USERS:
            session = doc(session_key("h", c, u, agent="history"))
            assert session.get("b", 0) == 2 * session.get("a", 0)
            assert session.get("a", 0) == turns("derived", user=u, conversation=c)
    for u in USERS:
        user = doc(user_key("h", u))
        assert user.get("turns", 0) == turns("count", user=u)
        assert user.get("balance", 0) == -turns("transfer", user=u)
        total += user.get("balance", 0)
    assert total == 0  # transfers keep the sum
    runs, merges = sum(attempts.values()), sum("merged" in line for line in lines)
    print(f"turns {len(attempts)}, runs {runs}, re-runs {runs - len(attempts)}, merges {merges}")


async def test_memory_history_is_serial(monkeypatch: pytest.MonkeyPatch) -> None:
    storage = MemoryStorage()
    merged: list[dict[str, Any]] = []
    monkeypatch.setattr(lifecycle, "_rebase", lifecycle._rebase)  # put back after the test
    report_merges(merged)
    lines = await asyncio.gather(*(run(storage, seed, TURNS) for seed in range(PROCESSES)))
    await check(storage, [line for part in lines for line in part] + merged)


FAULTS = {"file": True, "redis": False, "redis-cluster": True, "blob": True, "cosmos": True}
"""Backend -> whether faults are injected there (standalone Redis: the plain run)."""


@pytest.fixture
async def url(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[str]:
    yield STORES[request.param](str(tmp_path))


def _workers(url: str, faults: bool) -> list[subprocess.Popen[str]]:
    def args(seed: int) -> list[str]:
        if not faults:
            return []
        return ["0", str(DIE_AT_WRITE)] if seed == 0 else [str(IO_FAULT_RATE), "0"]

    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.state.history.worker",
                url,
                str(seed),
                str(TURNS),
                *args(seed),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(PROCESSES)
    ]


@pytest.mark.parametrize("url", SHARED, indirect=True)
async def test_history_across_processes_is_serial(url: str, request: pytest.FixtureRequest) -> None:
    faults = FAULTS[request.node.callspec.params["url"]]
    lines: list[dict[str, Any]] = []
    unfinished: list[dict[str, Any]] = []
    for seed, worker in enumerate(_workers(url, faults)):
        out, _ = worker.communicate(timeout=240)
        mine = [orjson.loads(line) for line in out.splitlines()]
        lines += mine
        if faults and seed == 0:
            assert worker.returncode == KILLED, "the worker meant to die mid-write did not"
            done = {line["done"] for line in mine if "done" in line}
            unfinished = [a["activity"] for a in mine if "activity" in a and a["activity"]["id"]
                          not in done]  # fmt: skip
            assert unfinished, "the worker died with no turn under way"
        else:
            assert worker.returncode == 0, "a turn failed (for contention or otherwise)"
    storage = open_storage(url)
    try:
        app = application(storage)
        for activity in unfinished:  # the channel redelivers what the dead process had begun
            attempt = await deliver(app, activity)
            lines.append({"done": activity["id"], "attempt": attempt})
        await check(storage, lines)
    finally:
        await storage.close()
