"""Exactly once per activity: a redelivered activity is not applied again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agent_state import ActivityConflictError, AgentApplication, TurnContext, TurnState
from agent_state.backends import MemoryStorage

CONVERSATION = "test/conversations/c1"
EVIDENCE = "test/c/c1/a-1"
"""The name of activity a-1's evidence, kept in the conversation bucket its turn writes."""


def payment(amount: int = 10, *, activity_id: str | None = "a-1") -> dict[str, Any]:
    wire = {"type": "message", "channelId": "test", "text": f"pay {amount}",
            "from": {"id": "ada"}, "conversation": {"id": "c1"}}  # fmt: skip
    if activity_id is not None:
        wire["id"] = activity_id
    return wire


def payments_app(storage: MemoryStorage, **options: object) -> AgentApplication:
    app = AgentApplication(storage, app_name="bot", **options)  # type: ignore[arg-type]

    @app.message()
    async def pay(ctx: TurnContext, state: TurnState) -> None:
        amount = int(ctx.text.split()[1])
        state["conversation:total"] = state.get("conversation.total", 0) + amount
        await ctx.send(f"total {state['conversation:total']}")

    return app


async def evidence(storage: MemoryStorage) -> dict[str, Any]:
    """The delivery evidence the conversation bucket carries (none: {})."""
    found: dict[str, Any] = (await storage.read([CONVERSATION]))[CONVERSATION].value
    return dict(found.get("$delivered", {}))


async def total(storage: MemoryStorage) -> int:
    counted: int = (await storage.read(["test/conversations/c1"]))["test/conversations/c1"].value[
        "total"
    ]
    return counted


async def test_a_redelivered_activity_is_applied_once_and_gets_the_first_replies() -> None:
    storage = MemoryStorage()
    app = payments_app(storage)
    first = await app.process(payment())
    again = await app.process(payment())
    assert [r.text for r in first] == [r.text for r in again] == ["total 10"]
    assert await total(storage) == 10
    assert EVIDENCE in await evidence(storage)
    assert [key async for key in storage.list("test/")] == [CONVERSATION]  # nothing beside it


async def test_concurrent_deliveries_of_one_activity_apply_it_once() -> None:
    storage = MemoryStorage()
    app = payments_app(storage)
    replies = await asyncio.gather(*(app.process(payment()) for _ in range(5)))
    assert await total(storage) == 10
    assert {r[0].text for r in replies} == {"total 10"}


async def test_the_same_id_with_other_content_is_a_typed_conflict() -> None:
    storage = MemoryStorage()
    app = payments_app(storage)
    await app.process(payment(10))
    with pytest.raises(ActivityConflictError) as info:
        await app.process(payment(99))
    assert info.value.activity_id == "a-1" and isinstance(info.value, ValueError)
    assert await total(storage) == 10


async def test_activities_without_an_id_are_processed_every_time() -> None:
    storage = MemoryStorage()
    app = payments_app(storage)
    await app.process(payment(activity_id=None))
    await app.process(payment(activity_id=None))
    assert await total(storage) == 20


async def test_the_record_is_kept_for_the_retention_window_only() -> None:
    storage = MemoryStorage()
    app = payments_app(storage, dedup_retention=0.3)
    await app.process(payment())
    written = (await evidence(storage))[EVIDENCE]["at"]
    while time.time() <= written + 0.3:
        await asyncio.sleep(0.05)  # waiting for the clock: the retention window
    await app.process(payment())  # past the window it is a new delivery
    assert await total(storage) == 20
    assert (await evidence(storage))[EVIDENCE]["at"] > written  # the old entry dropped
    with pytest.raises(ValueError):
        payments_app(storage, dedup_retention=0)


async def test_dedup_can_be_turned_off() -> None:
    storage = MemoryStorage()
    app = payments_app(storage, dedup_retention=None)
    await app.process(payment())
    await app.process(payment())
    assert await total(storage) == 20
