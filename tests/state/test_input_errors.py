"""Bad input in a turn gets a typed error before anything is written."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agent_state import (
    StatePathError,
    StateValidationError,
    TurnIds,
    UserState,
    open_turn,
    read_state,
)
from agent_state.backends import MemoryStorage, StoreItem

IDS = TurnIds(channel_id="c", user_id="u", conversation_id="k", app_name="a")


@pytest.mark.parametrize("scope", ["user", "conversation", "session", "app", "temp"])
async def test_a_dotted_key_naming_a_scope_is_refused_with_both_correct_forms(scope: str) -> None:
    storage = MemoryStorage()
    with pytest.raises(StatePathError) as info:
        async with open_turn(storage, IDS) as state:
            state[f"{scope}.visits"] = 1
    message = str(info.value)
    assert f"state['{scope}:visits']" in message and f"'{scope}.visits'" in message
    assert [key async for key in storage.list()] == []
    async with open_turn(storage, IDS) as state:
        with pytest.raises(StatePathError):
            state[f"{scope}.visits"]  # noqa: B018 - reading it is refused as well
        state["version.2"] = "a session member whose name has a dot but names no scope"
    assert [key async for key in storage.list()] == [
        "c/conversations/k/users/u/agents/a",
        "c/users/u/sessions/k",
    ]  # its index entry


@pytest.mark.parametrize("index", ["9" * 5_000, "1" + "0" * 25])
async def test_a_huge_list_index_in_a_path_is_a_path_error(index: str) -> None:
    storage = MemoryStorage()
    async with open_turn(storage, IDS) as state:
        state["user:items"] = [1]
        assert state.get(f"user.items.{index}", "absent") == "absent"
        with pytest.raises(StatePathError, match="out of range"):
            state.set(f"user.items.{index}", 2)
        assert not state.has(f"user.items.{index}")


class Profile(BaseModel):
    name: str = ""


class ProfileState(UserState):
    model = Profile
    schema_version = 2


@ProfileState.migration(from_version=1)
def broken(document: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("full_name")


async def test_a_migration_that_raises_is_a_typed_error_naming_key_and_versions() -> None:
    storage = MemoryStorage()
    await storage.write({"c/users/u": StoreItem({"full_name": "Ada"})})
    before = await storage.read(["c/users/u"])
    bucket = await read_state(storage, ProfileState, IDS)
    with pytest.raises(StateValidationError) as info:
        bucket.data  # noqa: B018 - a typed bucket decodes (and migrates) when first used
    error = info.value
    assert error.key == "c/users/u" and "version 1 to 2" in str(error)
    assert isinstance(error.__cause__, KeyError)
    with pytest.raises(StateValidationError):
        async with open_turn(storage, IDS, scopes=[ProfileState]) as state:
            state["user:name"] = "Grace"
    assert await storage.read(["c/users/u"]) == before
