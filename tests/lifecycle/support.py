"""A bot whose turns store what the framework stores about a user: user, conversation and
session buckets, the session's history and the delivery record of each reply (which names
the user and echoes their text), and a raw scan of a store for leftovers of a user."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from agent_state import AgentApplication, TurnContext, TurnState
from agent_state.backends import Storage

CHANNEL = "t"
AGENT = "lifecycle"
"""The app name of the test bot: its sessions are keyed by it."""


def application(storage: Storage) -> AgentApplication:
    """Each turn counts in every bucket, appends the text to the history and echoes it."""
    app = AgentApplication(storage, app_name=AGENT)

    @app.message()
    async def turn(ctx: TurnContext, state: TurnState) -> None:
        state["user:turns"] = state.get("user.turns", 0) + 1
        state["conversation:turns"] = state.get("conversation.turns", 0) + 1
        state["last"] = ctx.text
        message = {"id": ctx.activity.id or uuid.uuid4().hex, "role": "user", "content": ctx.text}
        await state.history.append(message)
        await ctx.send(f"you said {ctx.text}")

    return app


def activity(user: str, conversation: str, text: str) -> dict[str, Any]:
    """A message activity of `user` in `conversation` saying `text`."""
    return {
        "type": "message",
        "id": uuid.uuid4().hex,
        "channelId": CHANNEL,
        "from": {"id": user},
        "recipient": {"id": "bot"},
        "conversation": {"id": conversation},
        "text": text,
    }


async def raw_scan(storage: Storage) -> list[tuple[str, bytes]]:
    """Every key of the store with its stored document's JSON."""
    keys = [key async for key in storage.list("")]
    found = await storage.read(keys)
    return [(key, orjson.dumps(item.value)) for key, item in found.items()]


async def leftovers(storage: Storage, user: str, texts: list[str]) -> list[str]:
    """The keys whose key or document holds the user's id or any of their texts."""
    needles = [user.encode(), *(text.encode() for text in texts)]
    return [
        key
        for key, data in await raw_scan(storage)
        if user in key or any(needle in data for needle in needles)
    ]
