"""The framework's records (history, runs, AG-UI thread documents) and delivery evidence: one
typed format check refuses a stored document that is not a record of its kind, before anything
uses it, and never rewrites it."""

from __future__ import annotations

from typing import Any

import pytest

from agent_state import AgentApplication, Record, TurnContext, TurnState
from agent_state._history import _Entry, _Head, _Page
from agent_state._runs import RunRecord
from agent_state.agui._thread_input import Owner, SentState
from agent_state.agui._threads import ThreadRecord
from agent_state.backends import FormatError, MemoryStorage, StoreItem

RUN = {"format": 2, "id": "r", "status": "accepted", "input": "d", "selection": {},
       "children": [], "messages": [], "expires": 0.0, "opened": None}  # fmt: skip
KINDS: list[tuple[type[Record], dict[str, Any]]] = [
    (_Head, {"format": 1, "page_size": 32, "count": 1, "tail": [{}]}),
    (_Page, {"format": 1, "messages": []}),
    (_Entry, {"format": 1, "seq": 0}),
    (RunRecord, RUN),
    (Owner, {"format": 2, "user": "ada"}),
    (SentState, {"format": 2, "sent": {}, "last": None, "pending": {}}),
    (ThreadRecord, {"format": 1, "title": "", "created": 1.0, "updated": 2.0, "runs": []}),
]


def broken_copies(kind: type[Record], good: dict[str, Any]) -> list[dict[str, Any]]:
    """`good` with another format, and with each member it must have missing or mistyped."""
    copies = [{**good, "format": kind.format + 1}] if kind.format is not None else []
    for name in kind.fields:
        copies.append({key: value for key, value in good.items() if key != name})
        copies.append({**good, name: True})  # a bool is no int, str, list or dict
    return copies


@pytest.mark.parametrize(("kind", "good"), KINDS, ids=[k.kind for k, _ in KINDS])
def test_a_record_of_its_kind_is_read_and_any_other_document_refused(
    kind: type[Record], good: dict[str, Any]
) -> None:
    assert kind("k", None).stored() is None  # none stored yet
    assert kind("k", StoreItem(dict(good), "1")).stored() == good
    for broken in broken_copies(kind, good):
        record = kind("c/users/u/x", StoreItem(broken, "1"))
        with pytest.raises(FormatError, match="c/users/u/x"):
            record.stored()
        assert record.pending_write() is None  # never rewritten


def test_a_run_record_in_an_unknown_status_is_refused() -> None:
    with pytest.raises(FormatError, match="status"):
        RunRecord("k", StoreItem({**RUN, "status": "done"}, "1")).stored()


async def test_stored_delivery_evidence_that_is_not_some_fails_the_turn_before_the_handler() -> (
    None
):
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot")
    ran: list[str] = []

    @app.activity("message")
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.activity.id or "")

    key = "test/conversations/c1"
    planted = {"topic": "x", "$delivered": {"test/c/c1/a-1": {"digest": 5, "replies": "none"}}}
    await storage.write({key: StoreItem(planted)})
    activity = {"type": "message", "id": "a-1", "channelId": "test", "from": {"id": "u"},
                "conversation": {"id": "c1"}, "text": "hi"}  # fmt: skip
    with pytest.raises(FormatError, match="delivery"):
        await app.process(activity)
    assert ran == [] and (await storage.read([key]))[key].value == planted
