"""An M365 Agents SDK bot on our file store: two turns of one conversation at once, and no
lost update (M365's own MemoryStorage keeps one of the two increments).

The app is the SDK's own `AgentApplication`; only its storage (`AgentStateStorage`) and one
middleware (`TurnQueueMiddleware`) come from agent-state. The adapter below keeps replies in
memory instead of posting them to a channel, so the script runs without Azure.

    python examples/m365_bot.py [--dir FOLDER]
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from microsoft_agents.activity import (
    Activity,
    ChannelAccount,
    ConversationAccount,
    ResourceResponse,
)
from microsoft_agents.hosting.core import AgentApplication, TurnContext, TurnState
from microsoft_agents.hosting.core.channel_adapter import ChannelAdapter

from agent_state import ConversationState, TurnIds, open_storage, read_state
from agent_state.bridges.m365 import AgentStateStorage, TurnQueueMiddleware


class LocalAdapter(ChannelAdapter):
    """Prints what the bot sends instead of posting it to a channel."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    async def send_activities(
        self, context: Any, activities: list[Activity]
    ) -> list[ResourceResponse]:
        for activity in activities:
            print(f"bot: {activity.text}")
        return [ResourceResponse(id=str(n)) for n in range(len(activities))]

    async def update_activity(self, context: Any, activity: Activity) -> None:
        raise NotImplementedError

    async def delete_activity(self, context: Any, reference: Any) -> None:
        raise NotImplementedError


class NoConnections:
    """This bot has no OAuth routes, so it needs no connections."""

    def get_connection(self, name: str) -> Any:
        raise NotImplementedError

    def get_default_connection(self) -> Any:
        raise NotImplementedError

    def get_token_provider(self, claims_identity: Any, service_url: str) -> Any:
        raise NotImplementedError

    def get_default_connection_configuration(self) -> Any:
        raise NotImplementedError


def message(user: str, text: str) -> Activity:
    return Activity(
        type="message",
        channel_id="msteams",
        service_url="http://localhost",
        from_property=ChannelAccount(id=user),
        recipient=ChannelAccount(id="bot"),
        conversation=ConversationAccount(id="19:team@thread.v2"),
        text=text,
    )


async def main(folder: str) -> None:
    storage = open_storage(Path(folder).resolve().as_uri())
    app = AgentApplication[TurnState](
        storage=AgentStateStorage(storage),
        connection_manager=NoConnections(),  # type: ignore[arg-type]
        start_typing_timer=False,
    )

    @app.activity("message")
    async def count(context: TurnContext, state: TurnState) -> None:
        seen: Any = state.conversation.get_value("messages", lambda: 0)  # type: ignore[arg-type, return-value]
        await asyncio.sleep(0.01)  # some work (a model call...) while the other turn runs
        state.conversation.set_value("messages", seen + 1)
        await context.send_activity(f"{context.activity.text!r} is message {seen + 1}")

    adapter = LocalAdapter()
    adapter.use(TurnQueueMiddleware(attempts=3))
    turns = [message("29:ada", "hello from Ada"), message("29:grace", "hello from Grace")]
    await asyncio.gather(
        *[adapter.run_pipeline(TurnContext(adapter, activity), app.on_turn) for activity in turns]
    )
    ids = TurnIds("msteams", conversation_id="19:team@thread.v2")
    stored = await read_state(storage, ConversationState, ids)  # our API, the same document
    print(f"stored conversation state: {stored.document()}")
    await storage.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="./.m365-bot-state", help="folder of the file store")
    asyncio.run(main(parser.parse_args().dir))
