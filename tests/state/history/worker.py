"""One process of the turn history checker: random turns through AgentApplication.

Usage: python -m tests.state.history.worker STORAGE_URL SEED TURNS [IO_FAULT_RATE [DIE_AT_WRITE]]
Prints one JSON line per activity as it starts (`{"activity": ...}`) and as it is done
(`{"done": id, "attempt": n}`), so the checker knows every activity this process began
even if it is killed, and one per merge (`{"merged": keys}`: a save that replayed its
turn's changes onto a newer version instead of running the turn again). With faults, a
share of the store's primitive writes fails after writing the first key of its batch (the
activity is then redelivered, as a channel would), and the process kills itself in the
middle of its DIE_AT_WRITE-th primitive write.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from typing import Any

import orjson

from agent_state import AgentApplication, TurnContext, TurnState, open_storage
from agent_state import _lifecycle as lifecycle
from agent_state._document import Document
from agent_state.backends import Outcomes, PreparedWrite, Storage, StorageUnavailableError
from agent_state.backends._commit_contract import first_unit

USERS = ["ada", "grace", "linus"]
CONVERSATIONS = ["c1", "c2"]
KINDS = ["count", "log", "skew-a", "skew-b", "derived", "transfer"]
INTENT_TIMEOUT = 0.5
"""Seconds before readers abort a commit a killed or failed writer left (short, for tests)."""
KILLED = 17
"""Exit status of a worker that killed itself mid-write."""
DELIVERIES = 30
"""How often an activity whose turn failed on an injected fault is delivered again at most."""


def application(storage: Storage) -> AgentApplication:
    app = AgentApplication(storage, app_name="history")

    @app.message()
    async def turn(ctx: TurnContext, state: TurnState) -> None:
        kind, token = ctx.text.split()
        await asyncio.sleep(0)  # let other turns interleave with this one
        if kind == "count":
            state["conversation:count"] = state.get("conversation.count", 0) + 1
            state["user:turns"] = state.get("user.turns", 0) + 1
        elif kind == "log":
            log = state.get("conversation.log")
            state["conversation:log"] = [*(log or []), token]
        elif kind in ("skew-a", "skew-b"):  # rule a + b >= 1; each zeroes one while both are 1
            a, b = state.get("conversation.a", 1), state.get("conversation.b", 1)
            if a + b >= 2:
                state[f"conversation:{kind[-1]}"] = 0
        elif kind == "derived":  # session b == 2 * a, always
            a = state.get("session.a", 0) + 1
            state["session:a"], state["session:b"] = a, 2 * a
        elif kind == "transfer":  # user balance -> conversation pot: the sum never changes
            state["user:balance"] = state.get("user.balance", 0) - 1
            state["conversation:pot"] = state.get("conversation.pot", 0) + 1
        await ctx.send(f"{kind} {token} done on attempt {ctx.attempt}")

    return app


def activity_of(rng: random.Random, seed: int, i: int) -> dict[str, Any]:
    kind = rng.choice(KINDS)
    user, conversation = rng.choice(USERS), rng.choice(CONVERSATIONS)
    token = f"p{seed}-{i}"
    return {"type": "message", "id": token, "channelId": "h", "text": f"{kind} {token}",
            "from": {"id": user}, "conversation": {"id": conversation}}  # fmt: skip


async def deliver(app: AgentApplication, activity: dict[str, Any]) -> int:
    """Process `activity`, delivering it again while its turn fails on an injected fault;
    the attempt its turn was applied on."""
    kind, token = activity["text"].split()
    for _ in range(DELIVERIES):
        try:
            replies = await app.process(activity)
        except StorageUnavailableError:
            continue
        assert len(replies) == 1 and replies[0].text.startswith(f"{kind} {token} done")
        return int(replies[0].text.rsplit(" ", 1)[1])
    raise AssertionError(f"{token} failed on every delivery")


def inject_faults(storage: Storage, rng: random.Random, rate: float, die_at: int) -> None:
    """Make a share `rate` of the store's primitive writes fail part-way, once they applied
    their first atomic unit (`first_unit`), and the `die_at`-th one kill the process once
    its first unit landed."""
    original = storage._write
    calls = 0

    async def faulty(writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        nonlocal calls
        calls += 1
        if calls == die_at:  # killed once its first unit landed
            await original(first_unit(storage, writes), outcomes)
            os._exit(KILLED)
        if rng.random() >= rate:
            return await original(writes, outcomes)
        if len(writes) > 1:
            await original(first_unit(storage, writes), outcomes)
        raise StorageUnavailableError("injected failure part-way through a write")

    storage._write = faulty  # type: ignore[method-assign]


async def run(storage: Storage, seed: int, turns: int) -> list[dict[str, Any]]:
    """`turns` random concurrent turns, some delivered twice; a line per start and end."""
    rng = random.Random(seed)
    app = application(storage)
    lines: list[dict[str, Any]] = []

    async def one(i: int) -> None:
        activity = activity_of(rng, seed, i)
        lines.append(report({"activity": activity}))
        attempt = await deliver(app, activity)
        if rng.random() < 0.2:  # a channel retry redelivers it
            await deliver(app, activity)
        lines.append(report({"done": activity["id"], "attempt": attempt}))

    await asyncio.gather(*(one(i) for i in range(turns)))
    return lines


def report_merges(lines: list[dict[str, Any]]) -> None:
    """From now on, add a line `{"merged": keys}` to `lines` (and, in a worker process, to
    stdout) each time a save rebases its turn's changes onto the newer stored versions."""
    rebase = lifecycle._rebase

    async def reported(storage: Storage, documents: list[Document], keys: list[str]) -> None:
        await rebase(storage, documents, keys)
        lines.append(report({"merged": keys}))

    lifecycle._rebase = reported


def report(line: dict[str, Any]) -> dict[str, Any]:
    if __name__ == "__main__":
        sys.stdout.write(orjson.dumps(line).decode() + "\n")
        sys.stdout.flush()
    return line


async def main(url: str, seed: int, turns: int, rate: float, die_at: int) -> None:
    storage = open_storage(url)
    storage.intent_timeout = INTENT_TIMEOUT
    if rate or die_at:
        inject_faults(storage, random.Random(-seed), rate, die_at)
    report_merges([])
    await run(storage, seed, turns)
    await storage.close()


if __name__ == "__main__":
    args = sys.argv[1:] + ["0", "0"]
    asyncio.run(main(args[0], int(args[1]), int(args[2]), float(args[3]), int(args[4])))
