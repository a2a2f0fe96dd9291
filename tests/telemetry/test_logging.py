"""The lifecycle's events, logged under `agent_state.*` loggers with ids and counts and
without user content, and handed to listeners."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from agent_state import (
    ActivityError,
    AgentApplication,
    StateConflictError,
    TurnContext,
    TurnState,
    add_event_listener,
    user_key,
)
from agent_state.backends import MemoryStorage, StoreItem

USER = user_key("test", "ada")
CARD = "4111-1111-1111-1111"
SECRET = f"my card number is {CARD}"


def message(activity_id: str | None = None) -> dict[str, Any]:
    wire = {"type": "message", "channelId": "test", "text": SECRET,
            "from": {"id": "ada"}, "conversation": {"id": "c1"}}  # fmt: skip
    if activity_id is not None:
        wire["id"] = activity_id
    return wire


def contended_app(storage: MemoryStorage, interfering_runs: int) -> AgentApplication:
    """Stores the message text in user state; another writer changes it during the first
    `interfering_runs` runs of each turn."""
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def remember(ctx: TurnContext, state: TurnState) -> None:
        seen = state.get("user.texts", [])
        if ctx.attempt <= interfering_runs:
            await storage.write({USER: StoreItem({"texts": [f"{SECRET} {ctx.attempt}"]}, "*")})
        state["user:texts"] = [*seen, ctx.text]
        await ctx.send(f"you said {ctx.text}")

    return app


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if getattr(record, "event", None) == event]


def assert_no_content(caplog: pytest.LogCaptureFixture) -> None:
    assert caplog.records
    for record in caplog.records:
        assert record.name.startswith("agent_state.")
        assert CARD not in record.getMessage() and CARD not in repr(record.__dict__)


async def test_a_rerun_is_logged_with_ids_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="agent_state")
    await contended_app(MemoryStorage(), 1).process(message())
    (rerun,) = events(caplog, "rerun")
    assert rerun.name == "agent_state.turns" and rerun.levelno == logging.INFO
    assert rerun.fields == {  # type: ignore[attr-defined]
        "channel": "test", "user": "ada", "conversation": "c1", "app": "bot",
        "attempt": 2, "scopes": ["user"], "keys": 1,
    }  # fmt: skip
    message_text = rerun.getMessage()
    assert "attempt=2" in message_text and "user='ada'" in message_text
    (conflict,) = events(caplog, "conflict")
    assert conflict.fields == {"scopes": ["user"], "keys": 1}  # type: ignore[attr-defined]
    assert_no_content(caplog)


async def test_a_redelivery_is_logged_with_ids(caplog: pytest.LogCaptureFixture) -> None:
    app = contended_app(MemoryStorage(), 0)
    await app.process(message("a-1"))
    caplog.set_level(logging.INFO, logger="agent_state")
    await app.process(message("a-1"))
    (redelivery,) = events(caplog, "redelivery")
    assert redelivery.name == "agent_state.delivery" and redelivery.levelno == logging.INFO
    assert redelivery.fields == {  # type: ignore[attr-defined]
        "channel": "test", "user": "ada", "conversation": "c1", "app": "bot",
        "activity": "a-1", "replies": 1,
    }  # fmt: skip
    assert_no_content(caplog)


async def test_a_turn_given_up_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent_state")
    app = contended_app(MemoryStorage(), 99)
    app.turn_attempts = 2
    with pytest.raises(StateConflictError):
        await app.process(message())
    (given_up,) = events(caplog, "given_up")
    assert given_up.levelno == logging.WARNING
    assert given_up.fields == {"runs": 2, "scopes": ["user"], "keys": [USER]}  # type: ignore[attr-defined]
    assert len(events(caplog, "rerun")) == 1
    assert_no_content(caplog)


async def test_refused_input_is_logged_by_field(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent_state")
    hostile = {**message(), "text": {"pasted": SECRET}}  # not a string
    with pytest.raises(ActivityError):
        await contended_app(MemoryStorage(), 0).process(hostile)
    (refused,) = events(caplog, "refused")
    assert refused.name == "agent_state.input"
    assert refused.fields["field"] == "text"  # type: ignore[attr-defined]
    assert_no_content(caplog)


async def test_listeners_get_every_event_until_removed() -> None:
    seen: list[tuple[str, Mapping[str, object]]] = []
    remove = add_event_listener(lambda event, fields: seen.append((event, fields)))
    storage = MemoryStorage()
    try:
        await contended_app(storage, 1).process(message())
    finally:
        remove()
    assert [event for event, _ in seen] == ["conflict", "rerun"]
    await contended_app(storage, 1).process(message())
    assert len(seen) == 2


async def test_a_dead_writers_commit_settled_by_a_reader_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import time

    from agent_state.backends import _commit_contract as contract

    storage = MemoryStorage()
    await contract._create_both(storage)
    commit_id, _ = await contract._plant(storage, recorded=True, fate=None,
                                         deadline=time.time() - 1)  # fmt: skip
    caplog.set_level(logging.INFO, logger="agent_state")
    stored = await storage.read(contract.KEYS)
    assert [stored[key].value for key in contract.KEYS] == [{"v": 0}] * 2
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("agent_state.")]
    assert messages == [
        f"aborted 1 commit(s) past their deadline: [{commit_id!r}]",
        f"putting back 2 document(s) of aborted commits: {contract.KEYS!r}",
    ]
