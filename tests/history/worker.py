"""One process of the turn history checker: random turns through AgentApplication.

Usage: python -m tests.history.worker STORAGE_URL SEED TURNS
Prints one JSON line: what this process's applied turns add up to, for the checker.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections import Counter
from typing import Any

import orjson

from agent_state import AgentApplication, TurnContext, TurnState, open_storage
from agent_state.backends import Storage

USERS = ["ada", "grace", "linus"]
CONVERSATIONS = ["c1", "c2"]
KINDS = ["count", "log", "skew-a", "skew-b", "derived", "transfer"]


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


async def run(storage: Storage, seed: int, turns: int) -> dict[str, Any]:
    """`turns` random concurrent turns (some delivered twice); what they applied."""
    rng = random.Random(seed)
    app = application(storage)
    applied: Counter[str] = Counter()
    attempts: list[int] = []
    tokens: list[str] = []

    async def one(i: int) -> None:
        kind = rng.choice(KINDS)
        user, conversation = rng.choice(USERS), rng.choice(CONVERSATIONS)
        token = f"p{seed}-{i}"
        activity = {"type": "message", "id": token, "channelId": "h", "text": f"{kind} {token}",
                    "from": {"id": user}, "conversation": {"id": conversation}}  # fmt: skip
        deliveries = 2 if rng.random() < 0.2 else 1  # a channel retry redelivers it
        for _ in range(deliveries):
            replies = await app.process(activity)
            assert len(replies) == 1 and replies[0].text.startswith(f"{kind} {token} done")
        attempts.append(int(replies[0].text.rsplit(" ", 1)[1]))
        applied[f"{kind}/{user}/{conversation}"] += 1
        if kind == "log":
            tokens.append(f"{conversation}:{token}")

    await asyncio.gather(*(one(i) for i in range(turns)))
    return {"applied": dict(applied), "attempts": attempts, "tokens": tokens}


async def main(url: str, seed: int, turns: int) -> None:
    storage = open_storage(url)
    outcome = await run(storage, seed, turns)
    await storage.close()
    print(orjson.dumps(outcome).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
