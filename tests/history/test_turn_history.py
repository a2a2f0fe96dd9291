"""The turn history checker: random concurrent turns, invariants that fail on any anomaly.

Turns of six kinds run concurrently (in several OS processes where the store is shared),
some delivered twice: counters in two buckets, an append-only log, the write-skew pair
`a + b >= 1`, a derived member `b == 2 * a`, and transfers between a user's balance and a
conversation's pot. Afterwards the stored state must equal what the applied turns add up
to, with no turn failing for contention. It runs where a turn's save is all-or-nothing
(memory; Redis standalone, across processes); on stores without atomic batches a turn
spanning write groups is not yet all-or-nothing (docs/guide.md), so it is not run there.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections import Counter
from typing import Any

import orjson

from agent_state import conversation_key, open_storage, session_key, user_key
from agent_state.backends import MemoryStorage, Storage
from tests.conftest import server_missing
from tests.history.worker import CONVERSATIONS, USERS, run

TURNS = 60


async def check(storage: Storage, outcomes: list[dict[str, Any]]) -> None:
    applied: Counter[str] = Counter()
    for outcome in outcomes:
        applied.update(outcome["applied"])
    keys = [user_key("h", u) for u in USERS] + [conversation_key("h", c) for c in CONVERSATIONS]
    keys += [session_key("h", c, u) for c in CONVERSATIONS for u in USERS]
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
        logged = sorted(
            t.split(":", 1)[1] for o in outcomes for t in o["tokens"] if t.startswith(f"{c}:")
        )
        assert sorted(conversation.get("log", [])) == logged  # each exactly once
        assert conversation.get("a", 1) + conversation.get("b", 1) >= 1  # no write skew
        assert conversation.get("pot", 0) == turns("transfer", conversation=c)
        total += conversation.get("pot", 0)
        for u in USERS:
            session = doc(session_key("h", c, u))
            assert session.get("b", 0) == 2 * session.get("a", 0)
            assert session.get("a", 0) == turns("derived", user=u, conversation=c)
    for u in USERS:
        user = doc(user_key("h", u))
        assert user.get("turns", 0) == turns("count", user=u)
        assert user.get("balance", 0) == -turns("transfer", user=u)
        total += user.get("balance", 0)
    assert total == 0  # transfers keep the sum
    runs = [a for o in outcomes for a in o["attempts"]]
    print(f"turns {len(runs)}, runs {sum(runs)}, re-runs {sum(runs) - len(runs)}")


async def test_memory_history_is_serial() -> None:
    storage = MemoryStorage()
    outcomes = await asyncio.gather(*(run(storage, seed, TURNS) for seed in range(3)))
    await check(storage, list(outcomes))


async def test_redis_history_across_processes_is_serial() -> None:
    url = os.environ.get("AGENT_STATE_REDIS_URL")
    if not url:
        server_missing("Redis ($AGENT_STATE_REDIS_URL is not set)")
    namespaced = f"{url}?namespace=history-{uuid.uuid4().hex[:8]}"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.history.worker", namespaced, str(seed), str(TURNS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(3)
    ]
    outcomes = []
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0, "a turn failed (for contention or otherwise)"
        outcomes.append(orjson.loads(out))
    storage = open_storage(namespaced)
    try:
        await check(storage, outcomes)
    finally:
        await storage.close()
