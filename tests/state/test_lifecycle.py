"""The turn lifecycle: a turn's state is closed once it is saved or discarded."""

from __future__ import annotations

import asyncio

import pytest

from agent_state import (
    AgentApplication,
    StateClosedError,
    TurnContext,
    TurnIds,
    TurnState,
    open_turn,
    open_user,
)
from agent_state.backends import MemoryStorage

IDS = TurnIds(channel_id="c", user_id="u", conversation_id="k", app_name="a")
MESSAGE = {"type": "message", "channelId": "c", "text": "hi", "from": {"id": "u"},
           "conversation": {"id": "k"}}  # fmt: skip


async def test_using_state_after_its_turn_raises_and_nothing_is_lost_silently() -> None:
    storage = MemoryStorage()
    async with open_turn(storage, IDS) as state:
        state["user:n"] = 1
        user = state.user
    for late in (
        lambda: state.__setitem__("user:n", 2),
        lambda: user.__setitem__("n", 2),
        lambda: state.get("user.n"),
        lambda: state.conversation,
        lambda: user.data,
    ):
        with pytest.raises(StateClosedError):
            late()
    assert (await storage.read(["c/users/u"]))["c/users/u"].value == {"n": 1}


async def test_a_turn_that_failed_is_closed_too() -> None:
    storage = MemoryStorage()
    with pytest.raises(KeyError):
        async with open_turn(storage, IDS) as state:
            state["user:n"] = 1
            raise KeyError("boom")
    with pytest.raises(StateClosedError):
        state["user:n"] = 2
    assert await storage.read(["c/users/u"]) == {}


async def test_a_task_a_handler_leaves_behind_gets_a_clear_error() -> None:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="a")
    release = asyncio.Event()
    late: list[asyncio.Task[None]] = []

    async def write_later(state: TurnState) -> None:
        await release.wait()
        state["user:late"] = True

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        state["user:early"] = True
        late.append(asyncio.create_task(write_later(state)))

    await app.process(MESSAGE)
    release.set()
    with pytest.raises(StateClosedError):
        await late[0]
    assert (await storage.read(["c/users/u"]))["c/users/u"].value == {"early": True}


async def test_a_background_block_closes_its_bucket() -> None:
    storage = MemoryStorage()
    async with open_user(storage, "c", "u") as user:
        user["n"] = 1
    with pytest.raises(StateClosedError):
        user["n"] = 2
