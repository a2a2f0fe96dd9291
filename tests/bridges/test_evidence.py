"""The delivery evidence an agent-state bot keeps in a bucket document it shares with an ADK
session or an M365 app (the reserved member `$delivered`): neither bridge shows it, their
writes keep it, they refuse a state key of that name, and a redelivery to the bot still gets
its first replies without running the handler. On every backend, with the SDKs' own objects."""

from __future__ import annotations

from typing import Any, cast

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from microsoft_agents.hosting import core as ms
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState

from agent_state import AgentApplication, TurnContext, TurnIds, TurnState, open_turn, user_key
from agent_state.backends import Storage
from agent_state.bridges.adk import AgentStateSessionService
from agent_state.bridges.m365 import AgentStateStorage, TurnQueueMiddleware
from tests.bridges.m365_support import Item, NoConnections, StubAdapter, message

DELIVERED = "$delivered"
APP, USER = "shop", "ada"
M365_USER = "msteams/users/29:ada"


class Bot:
    """An agent-state bot whose message turns change only the user bucket (so a turn with an
    activity id keeps its evidence there), counting its handler's runs."""

    def __init__(self, storage: Storage, namespace: str | None) -> None:
        self.app = AgentApplication(storage, app_name="bot", namespace=namespace)
        self.runs = 0

        @self.app.message()
        async def on_message(ctx: TurnContext, state: TurnState) -> None:
            self.runs += 1
            state["user:visits"] = state.get("user.visits", 0) + 1
            await ctx.send(f"visit {state['user:visits']}")

    async def deliver(self, channel: str, user: str) -> list[str]:
        """Deliver activity `a-1` (the same one every time); the replies' texts."""
        activity = {
            "type": "message", "id": "a-1", "channelId": channel, "text": "hi",
            "from": {"id": user}, "conversation": {"id": "chat"},
        }  # fmt: skip
        return [reply.text or "" for reply in await self.app.process(activity)]


async def stored(storage: Storage, key: str) -> dict[str, Any]:
    """The raw stored document at `key` (evidence included)."""
    value: dict[str, Any] = (await storage.read([key]))[key].value
    return value


def event(delta: dict[str, Any]) -> Event:
    return Event(author="user", actions=EventActions(state_delta=delta))


# --- ADK ---------------------------------------------------------------------------------


async def test_adk_never_shows_the_evidence_and_every_append_keeps_it(storage: Storage) -> None:
    bot = Bot(storage, namespace=APP)
    first = await bot.deliver("adk", USER)
    key = user_key("adk", USER, namespace=APP)
    evidence = (await stored(storage, key))[DELIVERED]
    assert evidence and first == ["visit 1"]

    service = AgentStateSessionService(storage)
    created = await service.create_session(
        app_name=APP, user_id=USER, session_id="s", state={"user:name": "Ada"}
    )
    assert created.state == {"user:visits": 1, "user:name": "Ada"}
    await service.append_event(created, event({"user:visits": 2}))  # on the versions known
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded.state == {"user:visits": 2, "user:name": "Ada"}
    await AgentStateSessionService(storage).append_event(loaded, event({"user:visits": 3}))
    assert (await stored(storage, key))[DELIVERED] == evidence, "kept by both append paths"

    assert await service.get_user_state(app_name=APP, user_id=USER) == {"visits": 3, "name": "Ada"}
    (listed,) = (await service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert listed.state == {"user:visits": 3, "user:name": "Ada"}
    again = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert again is not None and again.state == listed.state

    assert await bot.deliver("adk", USER) == first
    assert bot.runs == 1
    async with open_turn(storage, TurnIds("adk", USER, namespace=APP)) as state:
        assert state.user.document() == {"visits": 3, "name": "Ada"}


@pytest.mark.parametrize("name", [DELIVERED, "user:" + DELIVERED, "app:" + DELIVERED])
async def test_adk_refuses_a_state_key_of_the_reserved_name(storage: Storage, name: str) -> None:
    bot = Bot(storage, namespace=APP)
    await bot.deliver("adk", USER)
    key = user_key("adk", USER, namespace=APP)
    before = await stored(storage, key)
    service = AgentStateSessionService(storage)
    with pytest.raises(ValueError, match="reserved"):
        await service.create_session(app_name=APP, user_id=USER, session_id="s0", state={name: 1})
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s0") is None
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    for fresh in (service, AgentStateSessionService(storage)):  # known versions, then a read
        with pytest.raises(ValueError, match="reserved"):
            await fresh.append_event(session, event({name: {}, "n": 1}))
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded.events == [] and loaded.state == {"user:visits": 1}
    assert await stored(storage, key) == before
    assert await bot.deliver("adk", USER) == ["visit 1"] and bot.runs == 1


# --- M365 --------------------------------------------------------------------------------


async def test_m365_reads_never_show_the_evidence_and_writes_keep_it(storage: Storage) -> None:
    bot = Bot(storage, namespace=None)
    first = await bot.deliver("msteams", "29:ada")
    key = user_key("msteams", "29:ada")
    evidence = (await stored(storage, key))[DELIVERED]
    assert evidence

    bridge = AgentStateStorage(storage)
    found = await bridge.read([M365_USER], target_cls=CachedAgentState)
    await bridge.write({M365_USER: Item({"visits": 5})})  # a new value, without the member
    await bridge.write({M365_USER: Item({"visits": 6})})  # again in the same turn
    assert await stored(storage, key) == {"visits": 6, DELIVERED: evidence}
    assert found[M365_USER].store_item_to_json() == {"visits": 1}
    read = await AgentStateStorage(storage).read([M365_USER], target_cls=Item)
    assert read[M365_USER].value == {"visits": 6}

    assert await bot.deliver("msteams", "29:ada") == first
    assert bot.runs == 1


async def test_m365_refuses_a_property_of_the_reserved_name(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    with pytest.raises(ValueError, match="reserved"):
        await bridge.write(
            {"msteams/conversations/c": Item({"n": 1}), M365_USER: Item({DELIVERED: {}})}
        )
    assert await bridge.read(["msteams/conversations/c", M365_USER], target_cls=Item) == {}


async def test_an_m365_turn_on_the_bots_user_document_keeps_its_evidence(
    storage: Storage,
) -> None:
    bot = Bot(storage, namespace=None)
    first = await bot.deliver("msteams", "29:ada")
    seen: list[dict[str, Any]] = []
    app = ms.AgentApplication[ms.TurnState](
        storage=AgentStateStorage(storage),
        connection_manager=cast(Any, NoConnections()),
        start_typing_timer=False,
    )

    async def on_message(ctx: ms.TurnContext, state: ms.TurnState) -> None:
        seen.append({k: state.user.get_value(k) for k in ("visits", DELIVERED)})
        state.user.clear()  # a new profile: the value written lacks the member
        state.user.set_value("profile", cast(Any, "reset"))

    app.activity("message")(on_message)
    adapter = StubAdapter()
    adapter.use(TurnQueueMiddleware())
    await adapter.run_pipeline(ms.TurnContext(adapter, message()), app.on_turn)
    async with open_turn(storage, TurnIds("msteams", "29:ada")) as state:
        assert state.user.document() == {"profile": "reset"}
    assert await bot.deliver("msteams", "29:ada") == first
    assert bot.runs == 1
    assert seen == [{"visits": 1, DELIVERED: None}], "the M365 turn never saw the evidence"
