"""Concurrent turns: queued per conversation, run again on conflicts, never lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_state import AgentApplication, StateConflictError, TurnContext, TurnState
from agent_state.backends import MemoryStorage


def msg(text: str, *, user: str = "ada", conversation: str = "c1") -> dict[str, Any]:
    return {"type": "message", "channelId": "test", "text": text, "from": {"id": user},
            "conversation": {"id": conversation}}  # fmt: skip


async def stored(storage: MemoryStorage, key: str) -> dict[str, Any] | None:
    item = (await storage.read([key])).get(key)
    return item.value if item is not None else None


async def test_fifty_concurrent_turns_of_one_conversation_all_count_without_conflicts() -> None:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot")
    attempts: list[int] = []

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        attempts.append(ctx.attempt)
        n = state.get("conversation.count", 0)
        await asyncio.sleep(0)  # every turn would read the same version if they overlapped
        state["conversation:count"] = n + 1
        await ctx.send(f"count {n + 1}")

    replies = await asyncio.gather(*(app.process(msg("hi", user=f"u{i}")) for i in range(50)))
    assert await stored(storage, "test/conversations/c1") == {"count": 50}
    assert attempts == [1] * 50  # queued in this process: no conflict, no second run
    assert sorted(str(r[0].text) for r in replies) == sorted(f"count {i}" for i in range(1, 51))


async def test_turns_of_fifty_conversations_sharing_an_app_counter_all_succeed() -> None:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        n = state.get("app.turns", 0)
        await asyncio.sleep(0)
        state["app:turns"] = n + 1
        await ctx.send(f"run {ctx.attempt}")

    replies = await asyncio.gather(
        *(app.process(msg("hi", conversation=f"c{i}")) for i in range(50))
    )
    assert await stored(storage, "app/bot") == {"turns": 50}
    assert all(len(r) == 1 for r in replies)  # one reply per turn: the last run's
    assert any(r[0].text != "run 1" for r in replies)  # some of them did run again


async def test_a_route_that_must_not_run_twice_fails_instead_and_saves_nothing() -> None:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot")
    charged: list[int] = []

    @app.message("pay", rerun=False)
    async def pay(ctx: TurnContext, state: TurnState) -> None:
        charged.append(state.get("conversation.total", 0))
        await app.process(msg("bump"))  # someone else changes the total meanwhile
        state["conversation:total"] = state.get("conversation.total", 0) + 10

    @app.message("bump")
    async def bump(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:total"] = state.get("conversation.total", 0) + 1

    with pytest.raises(StateConflictError):
        await app.process(msg("pay"))
    assert charged == [0]  # the handler ran once
    assert await stored(storage, "test/conversations/c1") == {"total": 1}
    with pytest.raises(TypeError):
        app.message("x", rerun="no")  # type: ignore[arg-type]
