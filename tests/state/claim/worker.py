"""One process delivering one payment activity, for the claim tests.

Usage: python -m tests.state.claim.worker STORAGE_URL EFFECTS_FILE MODE
MODE: `rerun-false` (a `rerun=False` route), `claim` (a claimed route) or `claim-die` (a
claimed route whose process dies in the handler, after its outside effect). The process
prints `ready`, waits for a line on stdin (so several start their turn at once), delivers
the activity and prints one JSON line: `{"replies": [...]}` or `{"error": class name}`.
The handler's outside effect is a line appended to EFFECTS_FILE, one per run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import orjson

from agent_state import AgentApplication, StateError, TurnContext, TurnState, open_storage
from agent_state.backends import Storage

LEASE = 1.0
"""Seconds a claim lives (short, so a test can see a dead claimer's claim expire)."""
PAYMENT_LATENCY = 0.2
"""Seconds the payment call of the handler takes (the work between claim and save)."""
KILLED = 17
"""Exit status of a worker that died in its handler."""
ACTIVITY: dict[str, Any] = {
    "type": "message", "id": "pay-1", "channelId": "c", "text": "pay 10",
    "from": {"id": "ada"}, "conversation": {"id": "k"},
}  # fmt: skip


def application(storage: Storage, effects: str, mode: str) -> AgentApplication:
    claimed = mode.startswith("claim")
    options: dict[str, Any] = {"claim_lease": LEASE} if claimed else {}
    app = AgentApplication(storage, app_name="shop", **options)
    route: dict[str, Any] = {"claim": True} if claimed else {"rerun": False}

    @app.message("pay 10", **route)
    async def pay(ctx: TurnContext, state: TurnState) -> None:
        with open(effects, "a") as out:  # the outside effect: one line per payment made
            out.write(f"{os.getpid()}\n")
        if mode == "claim-die":
            os._exit(KILLED)
        await asyncio.sleep(PAYMENT_LATENCY)  # the payment provider answering
        state["conversation:paid"] = state.get("conversation.paid", 0) + 10
        await ctx.send("paid")

    return app


async def deliver(app: AgentApplication) -> dict[str, Any]:
    """Process the activity; its replies, or the name of the state error it raised."""
    try:
        replies = await app.process(ACTIVITY)
    except StateError as error:
        return {"error": type(error).__name__}
    return {"replies": [reply.text for reply in replies]}


async def main(url: str, effects: str, mode: str) -> None:
    storage = open_storage(url)
    app = application(storage, effects, mode)
    print("ready", flush=True)
    sys.stdin.readline()
    outcome = await deliver(app)
    print(orjson.dumps(outcome).decode(), flush=True)
    await storage.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
