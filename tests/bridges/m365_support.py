"""Driving an M365 `AgentApplication` without a channel: replies kept on the turn, no OAuth,
and a counter route whose turns can be made to overlap."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from microsoft_agents import activity as ms_activity
from microsoft_agents.hosting import core as ms
from microsoft_agents.hosting.core.channel_adapter import ChannelAdapter
from microsoft_agents.hosting.core.storage import StoreItem as M365StoreItem


class StubAdapter(ChannelAdapter):
    """Keeps sent activities on the turn instead of posting them to a channel."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    async def send_activities(
        self, context: Any, activities: list[ms_activity.Activity]
    ) -> list[ms_activity.ResourceResponse]:
        replies: list[ms_activity.Activity] = context.turn_state.setdefault("replies", [])
        replies.extend(activities)
        return [ms_activity.ResourceResponse(id=str(i)) for i in range(len(activities))]

    async def update_activity(self, context: Any, activity: ms_activity.Activity) -> None:
        raise NotImplementedError

    async def delete_activity(
        self, context: Any, reference: ms_activity.ConversationReference
    ) -> None:
        raise NotImplementedError


class NoConnections:
    """A connection manager for an app without OAuth routes (never called)."""

    def get_connection(self, connection_name: str) -> Any:
        raise NotImplementedError

    def get_default_connection(self) -> Any:
        raise NotImplementedError

    def get_token_provider(self, claims_identity: Any, service_url: str) -> Any:
        raise NotImplementedError

    def get_default_connection_configuration(self) -> Any:
        raise NotImplementedError


def message(
    text: str = "hi", user: str = "29:ada", conversation: str = "19:c"
) -> ms_activity.Activity:
    return ms_activity.Activity(
        type="message",
        channel_id=cast(Any, "msteams"),
        service_url="http://localhost",
        from_property=ms_activity.ChannelAccount(id=user),
        recipient=ms_activity.ChannelAccount(id="bot"),
        conversation=ms_activity.ConversationAccount(id=conversation),
        text=text,
    )


def counter_app(
    storage: ms.Storage, barrier: asyncio.Barrier | None = None
) -> ms.AgentApplication[ms.TurnState]:
    """An app whose message turns add 1 to `conversation.count` (after `barrier`, when given,
    so concurrent turns all load before any saves)."""
    app = ms.AgentApplication[ms.TurnState](
        storage=storage, connection_manager=cast(Any, NoConnections()), start_typing_timer=False
    )

    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        count = cast(int, state.conversation.get_value("count", lambda: cast(Any, 0)))
        if barrier is not None:
            await barrier.wait()
        else:
            await asyncio.sleep(0)  # a yield, so turns without a queue would interleave
        state.conversation.set_value("count", cast(Any, count + 1))
        await ctx.send_activity(f"count {count + 1}")

    app.activity("message")(on_message)
    return app


async def turn(
    adapter: StubAdapter, app: ms.AgentApplication[ms.TurnState], text: str = "hi"
) -> None:
    """One message turn through the adapter's middleware pipeline."""
    context = ms.TurnContext(adapter, message(text))
    await adapter.run_pipeline(context, app.on_turn)


class Item(M365StoreItem):
    """An M365 StoreItem holding any JSON value."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def store_item_to_json(self) -> Any:
        return self.value

    @staticmethod
    def from_json_to_store_item(json_data: Any) -> Item:
        return Item(json_data)
