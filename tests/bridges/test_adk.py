"""`AgentStateSessionService` on every backend: ADK's contract, our guarantees on top, and
the lost updates of ADK's own services next to it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from agent_state import AgentApplication, TurnContext, TurnIds, TurnState, forget_user, open_turn
from agent_state.backends import Storage
from agent_state.bridges.adk import AgentStateSessionService

APP, USER = "shop", "ada"


def event(delta: dict[str, Any] | None = None, *, text: str = "hi", author: str = "user") -> Event:
    return Event(
        invocation_id="inv",
        author=author,
        content=types.Content(role=author, parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta or {})),
    )


def ids(session: Session) -> TurnIds:
    return TurnIds("adk", session.user_id, session.id, session.app_name, namespace=APP)


async def test_create_equals_get_and_keys_land_in_our_buckets(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    created = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1",
        state={"topic": "x", "user:name": "Ada", "app:open": True, "temp:scratch": 1},
    )  # fmt: skip
    assert created.state == {"topic": "x", "user:name": "Ada", "app:open": True}
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s1") == created
    async with open_turn(storage, ids(created)) as state:
        assert state.session.document() == {"topic": "x"}
        assert state.user.document() == {"name": "Ada"}
        assert state.app.document() == {"open": True}
        assert "scratch" not in state.temp
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=APP, user_id=USER, session_id="s1")


async def test_append_event_writes_state_record_and_history_together(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    first = event({"n": 1, "user:visits": 1, "temp:t": "gone"}, text="hello")
    await service.append_event(session, first)
    assert session.last_update_time == first.timestamp
    assert session.state["temp:t"] == "gone", "temp state stays in the invocation's session"
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded == session.model_copy(
        update={"state": {k: v for k, v in session.state.items() if k != "temp:t"}}
    )
    assert loaded.events == [first] and "temp:t" not in (first.actions.state_delta or {})
    async with open_turn(storage, ids(session)) as state:
        (message,) = await state.history.last(10)
        assert message["role"] == "user" and message["content"] == "hello"
        assert Event.model_validate(message["adk_event"]) == first
        assert state.session["n"] == 1 and state.user["visits"] == 1


async def test_a_stale_session_raises_and_writes_nothing(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    other = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert other is not None
    await service.append_event(other, event({"n": 1}))
    with pytest.raises(StaleSessionError, match="modified in storage"):
        await service.append_event(session, event({"n": 99}))
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded.state == {"n": 1} and len(loaded.events) == 1


async def read_modify_write(service: BaseSessionService, barrier: asyncio.Barrier) -> None:
    session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    await barrier.wait()  # every writer loaded before any appends
    await service.append_event(session, event({"count": session.state.get("count", 0) + 1}))


async def test_concurrent_appends_lose_updates_in_memory_and_none_on_the_bridge(
    storage: Storage,
) -> None:
    theirs = InMemorySessionService()
    await theirs.create_session(app_name=APP, user_id=USER, session_id="s", state={"count": 0})
    barrier = asyncio.Barrier(5)
    await asyncio.gather(*[read_modify_write(theirs, barrier) for _ in range(5)])
    lost = await theirs.get_session(app_name=APP, user_id=USER, session_id="s")
    assert lost is not None and lost.state["count"] == 1 and len(lost.events) == 5

    ours = AgentStateSessionService(storage)
    await ours.create_session(app_name=APP, user_id=USER, session_id="s", state={"count": 0})
    barrier = asyncio.Barrier(5)
    results = await asyncio.gather(
        *[read_modify_write(ours, barrier) for _ in range(5)], return_exceptions=True
    )
    applied = [r for r in results if r is None]
    assert all(isinstance(r, StaleSessionError) for r in results if r is not None)
    kept = await ours.get_session(app_name=APP, user_id=USER, session_id="s")
    assert kept is not None and kept.state["count"] == len(applied) == len(kept.events) == 1


async def test_a_user_key_changed_by_another_writer_is_not_overwritten(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(
        app_name=APP, user_id=USER, session_id="s1", state={"user:credits": 10}
    )
    other = await service.create_session(app_name=APP, user_id=USER, session_id="s2")
    await service.append_event(other, event({"user:credits": 11}))
    with pytest.raises(StaleSessionError, match="user:credits"):
        await service.append_event(session, event({"user:credits": 11}))
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"credits": 11}

    unchecked = AgentStateSessionService(storage, check_scoped_keys=False)
    await unchecked.append_event(session, event({"user:credits": 20}))
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"credits": 20}


async def test_get_session_config_and_redelivered_events(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = [event(text=str(i)) for i in range(5)]
    for i, e in enumerate(events):
        e.timestamp = 1000.0 + i
        await service.append_event(session, e)
    await service.append_event(session, events[4])  # an equal event delivered again
    twin = events[4].model_copy(update={"timestamp": 1005.0})  # same id, other content
    await service.append_event(session, twin)

    async def get(config: GetSessionConfig) -> list[Event]:
        found = await service.get_session(app_name=APP, user_id=USER, session_id="s", config=config)
        assert found is not None
        return found.events

    assert await get(GetSessionConfig()) == [*events, twin]
    assert await get(GetSessionConfig(num_recent_events=2)) == [events[4], twin]
    assert await get(GetSessionConfig(num_recent_events=0)) == []
    assert await get(GetSessionConfig(after_timestamp=1003.0)) == [events[3], events[4], twin]
    assert await get(GetSessionConfig(num_recent_events=4, after_timestamp=1004.0)) == [
        events[4], twin,
    ]  # fmt: skip


async def test_returned_sessions_share_nothing_with_the_store_or_each_other(
    storage: Storage,
) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, state={"deep": {"n": 1}})
    appended = event({"deep": {"n": 2}, "user:tags": ["a"]}, text="kept")
    await service.append_event(session, appended)
    appended.content.parts[0].text = "changed by the caller"  # type: ignore[index]
    appended.actions.state_delta["deep"]["n"] = 99
    configs = [None, GetSessionConfig(num_recent_events=1), GetSessionConfig(after_timestamp=0)]
    for config in configs:
        first = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=config
        )
        assert first is not None
        first.events[0].content.parts[0].text = "changed by a reader"  # type: ignore[index]
        first.events[0].actions.state_delta["deep"]["n"] = -1
        first.events[0].actions.state_delta["user:tags"].append("b")
        first.state["deep"]["n"] = -2
        first.state["user:tags"].append("c")
        second = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=config
        )
        assert second is not None and second.events[0] is not first.events[0]
        assert second.events[0].content.parts[0].text == "kept"  # type: ignore[index]
        assert second.events[0].actions.state_delta == {"deep": {"n": 2}, "user:tags": ["a"]}
        assert second.state == {"deep": {"n": 2}, "user:tags": ["a"]}


async def test_list_and_delete_sessions(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    for user, sid in (("ada", "a1"), ("ada", "a2"), ("bob", "b1")):
        session = await service.create_session(app_name=APP, user_id=user, session_id=sid)
        await service.append_event(session, event(text=sid))
    await service.create_session(app_name="other-app", user_id="ada", session_id="x")
    listed = await service.list_sessions(app_name=APP, user_id="ada")
    assert [s.id for s in listed.sessions] == ["a1", "a2"]
    assert all(s.events == [] for s in listed.sessions)
    everyone = await service.list_sessions(app_name=APP)
    assert sorted(s.id for s in everyone.sessions) == ["a1", "a2", "b1"]
    await service.delete_session(app_name=APP, user_id="ada", session_id="a1")
    assert await service.get_session(app_name=APP, user_id="ada", session_id="a1") is None
    assert [k async for k in storage.list("shop/adk/conversations/a1")] == []
    assert [s.id for s in (await service.list_sessions(app_name=APP)).sessions] == ["a2", "b1"]


async def test_empty_ids_raise_value_error() -> None:
    from agent_state import open_storage

    service = AgentStateSessionService(open_storage("memory://"))
    with pytest.raises(ValueError):
        await service.create_session(app_name="", user_id=USER)
    with pytest.raises(ValueError):
        await service.get_session(app_name=APP, user_id="", session_id="s")


async def test_user_state_is_shared_with_an_agent_state_bot(storage: Storage) -> None:
    bot = AgentApplication(storage, app_name="shop-bot", namespace=APP)

    @bot.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["user:visits"] = state.get("user.visits", 0) + 1

    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, event({"user:visits": 1}))
    activity = {
        "type": "message", "channelId": "adk", "text": "hi",
        "from": {"id": USER}, "conversation": {"id": "chat"},
    }  # fmt: skip
    await bot.process(activity)
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"visits": 2}


async def test_an_append_after_a_load_reads_nothing_and_writes_once(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    await service.create_session(app_name=APP, user_id=USER, session_id="s", state={"n": 0})
    session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    reads: list[list[str]] = []
    writes: list[list[str]] = []
    read, write = storage.read, storage.write

    async def counted_read(keys: Any) -> Any:
        reads.append(list(keys))
        return await read(keys)

    async def counted_write(changes: Any, **options: Any) -> Any:
        writes.append(list(changes))
        return await write(changes, **options)

    storage.read, storage.write = counted_read, counted_write  # type: ignore[method-assign]
    await service.append_event(session, event({"n": 1, "user:seen": True}, text="one"))
    await service.append_event(session, event({"n": 2}, text="two", author="model"))
    assert reads == [] and len(writes) == 2
    storage.read, storage.write = read, write  # type: ignore[method-assign]
    async with open_turn(storage, ids(session)) as state:
        assert state.session.document() == {"n": 2} and state.user.document() == {"seen": True}
        assert [m["content"] for m in await state.history.first(10)] == ["one", "two"]
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded.events == session.events and loaded == session


async def test_a_version_moved_by_another_writer_is_read_again_and_nothing_lost(
    storage: Storage,
) -> None:
    service, other = AgentStateSessionService(storage), AgentStateSessionService(storage)
    await service.create_session(app_name=APP, user_id=USER, session_id="s1")
    session = await service.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert session is not None
    elsewhere = await other.create_session(app_name=APP, user_id=USER, session_id="s2")
    await other.append_event(elsewhere, event({"user:y": 1}))  # the user bucket moves on
    await service.append_event(session, event({"user:x": 5, "n": 1}))
    assert await service.get_user_state(app_name=APP, user_id=USER) == {"y": 1, "x": 5}
    again = await other.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert again is not None and again.state == {"n": 1, "user:x": 5, "user:y": 1}
    await other.append_event(again, event({"n": 2}))  # `service` now holds an old record
    with pytest.raises(StaleSessionError, match="modified in storage"):
        await service.append_event(session, event({"n": 99}))


async def test_a_history_longer_than_a_page_reads_back_whole(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = [event(text=str(i)) for i in range(70)]
    for e in events:
        await service.append_event(session, e)
    async with open_turn(storage, ids(session)) as state:
        assert await state.history.count() == 70
        messages = await state.history.first(70)
        assert [m["content"] for m in messages] == [str(i) for i in range(70)]
        assert await state.history.holds([m["id"] for m in messages]) == {m["id"] for m in messages}
        assert await state.history.after(messages[40]["id"], 2) == messages[41:43]
    loaded = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert loaded is not None and loaded.events == events
    recent = await service.get_session(
        app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(num_recent_events=40)
    )
    assert recent is not None and recent.events == events[30:]
    tail = await service.get_session(
        app_name=APP, user_id=USER, session_id="s", config=GetSessionConfig(num_recent_events=3)
    )
    assert tail is not None and tail.events == events[67:]


async def test_forget_user_finds_a_session_with_no_state_of_its_own(storage: Storage) -> None:
    service = AgentStateSessionService(storage)
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    session = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    await service.append_event(session, event(text="hello"))  # an append written at once
    await forget_user(storage, "adk", USER, namespace=APP)
    assert [k async for k in storage.list(f"{APP}/adk/conversations/s")] == []
    assert await service.get_session(app_name=APP, user_id=USER, session_id="s") is None
