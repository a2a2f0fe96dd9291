"""`AgentStateStorage` and `TurnQueueMiddleware` on every backend, through their own objects
and through an M365 `AgentApplication`."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import pytest
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState
from microsoft_agents.hosting.core.storage import MemoryStorage as M365MemoryStorage

from agent_state import TurnIds, open_storage, open_turn, user_key
from agent_state.backends import ConflictError, Storage
from agent_state.bridges.m365 import AgentStateStorage, TurnQueueMiddleware
from tests.bridges.m365_support import Item, StubAdapter, counter_app, turn

CONVERSATION = "msteams/conversations/19:c"
T = TypeVar("T")


async def elsewhere(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` as another writer would: a task of its own, outside this turn's context."""
    return await asyncio.create_task(coro, context=contextvars.Context())


async def test_an_m365_user_state_is_our_user_bucket(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    assert bridge.storage_key("msteams/users/29:ada") == user_key("msteams", "29:ada")
    await bridge.write({"msteams/users/29:ada": CachedAgentState(cast(Any, {"visits": 3}))})
    async with open_turn(storage, TurnIds("msteams", "29:ada")) as state:
        assert state.user["visits"] == 3
        state.user["visits"] = 4
    found = await bridge.read(["msteams/users/29:ada"], target_cls=CachedAgentState)
    assert found["msteams/users/29:ada"].store_item_to_json() == {"visits": 4}


async def test_keys_map_one_to_one_and_values_round_trip(storage: Storage) -> None:
    bridge = AgentStateStorage(storage, namespace="bot one")
    values: dict[str, Any] = {
        "a/b": [1, "x"], "a%2Fb": "scalar", "a//b": 0, "/a": None, "a/": False, ".": 1.5,
        "..": {"$m365": "reserved"}, "a b/é": {"n": {"m": [True]}}, "auth:_SignInState:x:y": {},
    }  # fmt: skip
    keys = {bridge.storage_key(key) for key in values}
    assert len(keys) == len(values)
    await bridge.write({key: Item(value) for key, value in values.items()})
    found = await bridge.read(list(values), target_cls=Item)
    assert {key: item.value for key, item in found.items()} == values
    assert all(key.startswith("bot%20one/") for key in keys)


async def test_empty_or_none_arguments_raise_value_error() -> None:
    bridge = AgentStateStorage(open_storage("memory://"))
    for call in (
        bridge.read([], target_cls=Item), bridge.read(None, target_cls=Item),  # type: ignore[arg-type]
        bridge.read([""], target_cls=Item), bridge.write({}), bridge.write(None),  # type: ignore[arg-type]
        bridge.delete([]), bridge.delete(None),  # type: ignore[arg-type]
    ):  # fmt: skip
        with pytest.raises(ValueError):
            await call


async def test_delete_takes_any_iterable_and_reads_are_never_aliased(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    await bridge.write({"k1": Item({"a": [1]}), "k2": Item(2)})
    first = await bridge.read(["k1"], target_cls=Item)
    first["k1"].value["a"].append(2)
    again = await bridge.read(["k1"], target_cls=Item)
    assert again["k1"].value == {"a": [1]}
    await bridge.delete({"k1", "k2", "never-written"})
    assert await bridge.read(["k1", "k2"], target_cls=Item) == {}


async def test_an_item_read_is_written_conditionally_on_its_version(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    await bridge.write({"k": Item({"n": 0})})
    loaded = asyncio.Event()
    first_saved = asyncio.Event()

    async def second_turn() -> None:
        item = (await bridge.read(["k"], target_cls=Item))["k"]
        loaded.set()
        await first_saved.wait()
        item.value["n"] += 10
        await bridge.write({"k": item})

    async def first_turn() -> None:
        await loaded.wait()
        item = (await bridge.read(["k"], target_cls=Item))["k"]
        item.value["n"] += 1
        await bridge.write({"k": item})
        first_saved.set()

    results = await asyncio.gather(second_turn(), first_turn(), return_exceptions=True)
    assert isinstance(results[0], ConflictError) and results[0].keys == ["k"]
    assert results[1] is None
    assert (await bridge.read(["k"], target_cls=Item))["k"].value == {"n": 1}


async def test_a_missing_item_is_created_once_and_a_failed_batch_writes_nothing(
    storage: Storage,
) -> None:
    bridge = AgentStateStorage(storage)
    await bridge.write({"msteams/users/u": Item({"seen": 1})})
    both_read = asyncio.Barrier(2)
    first_saved = asyncio.Event()

    async def turn_(n: int) -> None:
        found = await bridge.read(["msteams/conversations/c", "msteams/users/u"], target_cls=Item)
        assert "msteams/conversations/c" not in found
        await both_read.wait()
        if n:
            await first_saved.wait()
        user = found["msteams/users/u"]
        user.value["seen"] += 1
        try:
            await bridge.write(
                {"msteams/users/u": user, "msteams/conversations/c": Item({"by": n})}
            )
        finally:
            first_saved.set()

    first, second = await asyncio.gather(turn_(0), turn_(1), return_exceptions=True)
    assert first is None
    assert isinstance(second, ConflictError)
    assert second.keys == ["msteams/conversations/c", "msteams/users/u"]
    found = await bridge.read(["msteams/conversations/c", "msteams/users/u"], target_cls=Item)
    assert found["msteams/conversations/c"].value == {"by": 0}
    assert found["msteams/users/u"].value == {"seen": 2}


async def test_a_key_deleted_in_a_turn_is_then_written_create_only(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    await bridge.write({"k": Item({"v": 1})})

    async def delete_then_write() -> None:
        item = (await bridge.read(["k"], target_cls=Item))["k"]
        await bridge.delete({"k"})
        await elsewhere(AgentStateStorage(storage).write({"k": Item({"v": "other"})}))
        await bridge.write({"k": item})

    with pytest.raises(ConflictError):
        await elsewhere(delete_then_write())
    assert (await bridge.read(["k"], target_cls=Item))["k"].value == {"v": "other"}


async def _count(storage: Any) -> int:
    found = await storage.read([CONVERSATION], target_cls=CachedAgentState)
    return int(found[CONVERSATION].state["count"]) if CONVERSATION in found else 0


async def test_concurrent_turns_lose_updates_on_m365_memory_and_none_on_the_bridge(
    storage: Storage,
) -> None:
    theirs = M365MemoryStorage()
    adapter = StubAdapter()
    app = counter_app(theirs, asyncio.Barrier(5))
    assert await asyncio.gather(*[turn(adapter, app) for _ in range(5)]) == [None] * 5
    assert await _count(theirs) == 1, "M365's MemoryStorage kept 1 of 5 increments"

    bridge = AgentStateStorage(storage)
    app = counter_app(bridge, asyncio.Barrier(5))
    results = await asyncio.gather(*[turn(adapter, app) for _ in range(5)], return_exceptions=True)
    applied = [r for r in results if r is None]
    assert all(isinstance(r, ConflictError) for r in results if r is not None)
    assert await _count(bridge) == len(applied) == 1, "every turn that returned was kept"


async def test_the_turn_queue_runs_a_conversations_turns_one_at_a_time(storage: Storage) -> None:
    bridge = AgentStateStorage(storage)
    adapter = StubAdapter()
    adapter.use(TurnQueueMiddleware())
    app = counter_app(bridge)
    await asyncio.gather(*[turn(adapter, app) for _ in range(5)])
    assert await _count(bridge) == 5


async def test_attempts_run_a_conflicting_turn_again_on_fresh_state(storage: Storage) -> None:
    """Two processes' worth of apps (each its own adapter and queue) on one store."""
    bridges = [AgentStateStorage(storage), AgentStateStorage(storage)]
    adapters = [StubAdapter(), StubAdapter()]
    for adapter in adapters:
        adapter.use(TurnQueueMiddleware(attempts=10))
    apps = [counter_app(bridge) for bridge in bridges]
    await asyncio.gather(*[turn(adapters[i % 2], apps[i % 2]) for i in range(6)])
    assert await _count(bridges[0]) == 6


def test_the_middleware_refuses_bad_attempts() -> None:
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError):
            TurnQueueMiddleware(attempts=bad)  # type: ignore[arg-type]
