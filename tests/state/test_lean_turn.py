"""A turn that meets no conflict takes the framework's own path into storage and builds no
retry machinery; the keys it trusts were checked once, when its plan was built."""

from __future__ import annotations

from typing import Any

import pytest

from agent_state import (
    Activity,
    AgentApplication,
    AgentState,
    Record,
    TurnContext,
    TurnIds,
    TurnState,
    open_turn,
)
from agent_state import _lifecycle as lifecycle
from agent_state.backends import InvalidKeyError, MemoryStorage, StoreItem
from agent_state.backends._items import BuiltKeys, BuiltWrites

IDS = TurnIds("c", "u", "k", "app")


class Recording(MemoryStorage):
    """A real MemoryStorage noting the type of what each read and write was given."""

    def __init__(self) -> None:
        super().__init__()
        self.given: list[type] = []

    async def read(self, keys: Any) -> dict[str, StoreItem]:
        self.given.append(type(keys))
        return await super().read(keys)

    async def write(self, changes: Any, **options: Any) -> dict[str, str]:
        self.given.append(type(changes))
        return await super().write(changes, **options)


async def test_a_turn_reads_and_writes_through_the_framework_path() -> None:
    storage = Recording()
    async with open_turn(storage, IDS) as state:
        state["conversation:n"] = 1
    assert storage.given == [BuiltKeys, BuiltWrites]


async def test_a_bot_turn_with_an_activity_id_reads_and_writes_through_it() -> None:
    storage = Recording()
    app = AgentApplication(storage, app_name="app")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:n"] = 1
        await ctx.send("hi")

    activity = Activity(id="a1", channel_id="c", from_={"id": "u"}, conversation={"id": "k"})
    assert [r.text for r in await app.process(activity)] == ["hi"]
    assert storage.given == [BuiltKeys, BuiltWrites]
    assert [r.text for r in await app.process(activity)] == ["hi"]  # a redelivery


class Note(Record):
    kind = "note"


class BadKey(AgentState):
    scope = "bad"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        return f"bad//{ids.user_id}"


async def test_a_custom_scope_key_is_checked_when_the_plan_is_built() -> None:
    storage = Recording()
    with pytest.raises(InvalidKeyError):
        async with open_turn(storage, IDS, scopes=[BadKey]):
            pass
    assert storage.given == []  # refused before any I/O


async def test_outside_extra_keys_are_still_checked() -> None:
    storage = Recording()
    with pytest.raises(InvalidKeyError):
        async with open_turn(storage, IDS, extra_keys=("a//b",)):
            pass
    with pytest.raises(InvalidKeyError):
        async with open_turn(storage, IDS) as state:
            state.attach(Note, "x/../y")
    assert storage.given == [BuiltKeys]  # the second turn's read; nothing written


async def test_a_turn_without_a_conflict_builds_no_retry_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built: list[lifecycle.ConflictRetries] = []

    class Counted(lifecycle.ConflictRetries):
        __slots__ = ()

        def __init__(self, *args: Any, **options: Any) -> None:
            built.append(self)
            super().__init__(*args, **options)

    monkeypatch.setattr(lifecycle, "ConflictRetries", Counted)
    storage = MemoryStorage()

    async def body(state: TurnState, attempt: int) -> int:
        state["conversation:n"] = state.get("conversation.n", 0) + 1
        return attempt

    assert await lifecycle.run_turn(storage, IDS, body) == 1
    assert built == []

    async def overtaken(state: TurnState, attempt: int) -> int:  # one conflict
        seen = state.get("conversation.n", 0)
        if attempt == 1:
            async with open_turn(storage, IDS) as other:
                other["conversation:n"] = seen + 10
        state["conversation:n"] = seen + 1
        return attempt

    assert await lifecycle.run_turn(storage, IDS, overtaken) == 2
    assert [policy.rerun for policy in built] == [False, True]  # the save's, the re-run's
