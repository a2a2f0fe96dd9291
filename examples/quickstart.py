"""A scripted chat with a bot whose state survives restarts: run it twice and compare.

Ada and Grace talk to the bot in a group chat, then Ada in a 1:1 chat. The bot keeps
user state (visits, across chats), conversation state (the topic, shared by members),
session state (each member's notes in one chat), app state (turns ever served) and temp
state (this turn only), in local files under `./.quickstart-state` (or `--dir`, or the
AGENT_STATE_QUICKSTART_DIR environment variable).

    python examples/quickstart.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
from pathlib import Path

from agent_state import Activity, AgentApplication, TurnContext, TurnState, parse_key, write_group
from agent_state.backends import FileStorage

DEFAULT_DIR = "./.quickstart-state"
DIR_VARIABLE = "AGENT_STATE_QUICKSTART_DIR"

SCRIPT = [
    ("team-chat", "ada", "Ada", "hello"),
    ("team-chat", "grace", "Grace", "hello"),
    ("team-chat", "ada", "Ada", "topic: release planning"),
    ("team-chat", "grace", "Grace", "note: I own the changelog"),
    ("ada-dm", "ada", "Ada", "hello"),
    ("ada-dm", "ada", "Ada", "note: ask Grace about the changelog"),
    ("ada-dm", "ada", "Ada", "status"),
    ("team-chat", "grace", "Grace", "status"),
    ("team-chat", "grace", "Grace", "what's up?"),
]


def build_app(storage: FileStorage) -> AgentApplication:
    """The bot: a few routes over the five scopes."""
    app = AgentApplication(storage, app_name="quickstart")

    @app.before_turn
    async def remember_name(ctx: TurnContext, state: TurnState) -> None:
        sender = ctx.activity.from_property  # every activity of this demo names its sender
        assert sender is not None
        state["temp:name"] = state["user:name"] = sender.name

    @app.message("hello")
    async def hello(ctx: TurnContext, state: TurnState) -> None:
        visits = state.get("user.visits", 0) + 1
        state["user:visits"] = visits
        name = state["temp:name"]
        if visits == 1:
            await ctx.send(f"Nice to meet you, {name}!")
        else:
            await ctx.send(f"Welcome back, {name}! This is visit {visits}.")

    @app.message(re.compile(r"^topic:", re.IGNORECASE))
    async def set_topic(ctx: TurnContext, state: TurnState) -> None:
        topic = ctx.text.split(":", 1)[1].strip()
        state["conversation:topic"] = topic
        await ctx.send(f"Everyone here now sees the topic {topic!r}.")

    @app.message(re.compile(r"^note:", re.IGNORECASE))
    async def add_note(ctx: TurnContext, state: TurnState) -> None:
        note = ctx.text.split(":", 1)[1].strip()
        notes = state.get("notes", [])  # no prefix: session state, this user in this chat
        if note in notes:
            await ctx.send("I had noted that already (in this chat, for you).")
            return
        state["notes"] = [*notes, note]
        await ctx.send(f"Noted; {len(notes) + 1} note(s) for you in this chat.")

    @app.message("status")
    async def status(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send(
            f"user: {state['temp:name']}, visits {state.get('user.visits', 0)}, "
            f"plan {state.get('user.plan', 'free')!r} | "
            f"conversation: topic {state.get('conversation.topic', '(none)')!r} | "
            f"session: notes {state.get('notes', [])} | "
            f"app: {state.get('app.turns', 0)} turns served before this one"
        )

    @app.message()
    async def fallback(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send("Try: hello, topic: ..., note: ..., status.")

    @app.after_turn
    async def count_turn(ctx: TurnContext, state: TurnState) -> None:
        state["app:turns"] = state.get("app.turns", 0) + 1

    return app


async def main(directory: Path) -> None:
    storage = FileStorage(directory, write_group=write_group)
    print(f"state folder: {storage.root}")
    app = build_app(storage)
    for conversation, user_id, name, text in SCRIPT:
        activity = Activity(
            channel_id="quickstart",
            from_={"id": user_id, "name": name},
            recipient={"id": "bot", "name": "Bot"},
            conversation={"id": conversation},
            text=text,
        )
        print(f"[{conversation}] {name}: {text}")
        for reply in await app.process(activity):
            print(f"[{conversation}] bot: {reply.text}")

    print("\nWhat each scope remembers (run me again: it all carries over):")
    listed = [key async for key in storage.list("")]
    keys = sorted(key for key in listed if parse_key(key).kind == "state")  # the scopes' own
    documents = await storage.read(keys)
    width = max(map(len, keys), default=0)
    for key in keys:
        print(f"  {parse_key(key).scope:<12} {key:<{width}}  {documents[key].value}")
    await storage.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir",
        default=os.environ.get(DIR_VARIABLE, DEFAULT_DIR),
        help=f"state folder (default: ${DIR_VARIABLE} or {DEFAULT_DIR})",
    )
    asyncio.run(main(Path(parser.parse_args().dir)))
