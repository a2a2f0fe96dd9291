"""Spans and metrics of instrumented turns, read back from the SDK's in-memory exporters."""

from __future__ import annotations

from typing import Any

from agent_state import AgentApplication, TurnContext, TurnState, user_key
from agent_state.backends import MemoryStorage, Storage, StoreItem

from .conftest import Telemetry

USER = user_key("test", "ada")


def message(text: str = "hi", activity_id: str | None = None) -> dict[str, Any]:
    wire = {"type": "message", "channelId": "test", "text": text,
            "from": {"id": "ada"}, "conversation": {"id": "c1"}}  # fmt: skip
    if activity_id is not None:
        wire["id"] = activity_id
    return wire


def counting_app(storage: Storage, interfere_on_first_run: bool) -> AgentApplication:
    """A bot counting in user state; on its first run another writer sets the count."""
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        seen = state.get("user.count", 0)
        if interfere_on_first_run and ctx.attempt == 1:
            await storage.write({USER: StoreItem({"count": 100}, "*")})
        state["user:count"] = seen + 1
        await ctx.send(f"count {seen + 1}")

    return app


async def test_a_turn_that_ran_again_once(telemetry: Telemetry) -> None:
    storage = MemoryStorage()
    replies = await counting_app(storage, True).process(message())
    assert [reply.text for reply in replies] == ["count 101"]

    spans = telemetry.spans.get_finished_spans()
    (turn,) = [span for span in spans if span.name == "agent_state.turn"]
    assert turn.parent is None
    assert dict(turn.attributes or {}) == {
        "agent_state.attempt": 2,
        "agent_state.conflict": True,
        "agent_state.merged": False,
        "agent_state.redelivery": False,
        "agent_state.scopes.read": ("app", "conversation", "session", "user"),
        "agent_state.scopes.written": ("user",),
    }
    children = [span for span in spans if span is not turn]
    assert all(span.parent is not None and span.parent.span_id == turn.context.span_id
               for span in children)  # fmt: skip
    # run 1: load, the other writer's write, the save that conflicts, the read of the newer
    # version that shows the clash (the turn read the count); run 2: load, save
    assert [span.name for span in children] == [
        "agents.storage.read", "agents.storage.write", "agents.storage.write",
        "agents.storage.read", "agents.storage.read", "agents.storage.write",
    ]  # fmt: skip
    conflicted = children[2]
    assert conflicted.status.status_code.name == "ERROR"
    assert conflicted.attributes is not None and conflicted.attributes["storage.keys.count"] == 1
    for span in children:
        attributes = dict(span.attributes or {})
        assert attributes["storage.backend"] == "MemoryStorage"
        assert attributes["storage.operation"] == span.name.rsplit(".", 1)[1]
    load = dict(children[0].attributes or {})
    assert load["storage.keys.count"] == 4 and load["storage.bytes"] == 0  # nothing stored yet
    saved = dict(children[5].attributes or {})
    assert saved["storage.bytes"] == len(b'{"count":101}')

    assert telemetry.counts() == {
        "agent_state.turns": 1,
        "agent_state.turn.reruns": 1,
        "agent_state.turn.conflicts": 1,
        "agent_state.turn.duration": 1,
    }


async def test_a_redelivered_turn_is_marked(telemetry: Telemetry) -> None:
    app = counting_app(MemoryStorage(), False)
    first = await app.process(message(activity_id="a-1"))
    again = await app.process(message(activity_id="a-1"))
    assert [r.text for r in first] == [r.text for r in again] == ["count 1"]
    turns = [s for s in telemetry.spans.get_finished_spans() if s.name == "agent_state.turn"]
    assert [dict(s.attributes or {})["agent_state.redelivery"] for s in turns] == [False, True]
    assert [dict(s.attributes or {})["agent_state.scopes.written"] for s in turns] == [
        ("user",),
        (),
    ]  # fmt: skip  (the evidence travels in the user bucket the turn wrote)


async def test_a_merged_save_is_marked(telemetry: Telemetry) -> None:
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def note(ctx: TurnContext, state: TurnState) -> None:
        state["user:note"] = "x"  # written, never read: another writer's member merges
        if ctx.attempt == 1:
            await storage.write({USER: StoreItem({"other": 1}, "*")})

    await app.process(message())
    (turn,) = telemetry.spans.get_finished_spans()[-1:]
    attributes = dict(turn.attributes or {})
    assert turn.name == "agent_state.turn"
    assert (attributes["agent_state.attempt"], attributes["agent_state.merged"]) == (1, True)
    assert (await storage.read([USER]))[USER].value == {"other": 1, "note": "x"}


async def test_uninstrumented_the_methods_are_the_originals_again() -> None:
    from agent_state.telemetry import instrument, uninstrument

    originals = (Storage.read, Storage.write, Storage.delete, AgentApplication.process)
    instrument()
    assert Storage.read is not originals[0]
    uninstrument()
    assert (Storage.read, Storage.write, Storage.delete, AgentApplication.process) == originals


async def test_an_agui_run_is_a_span_around_its_storage_calls(telemetry: Telemetry) -> None:
    import httpx
    from pydantic import BaseModel
    from starlette.requests import Request

    from agent_state.agui import AgentRun, AGUIEndpoint

    class Board(BaseModel):
        count: int = 0

    async def agent(run: AgentRun[Board]) -> None:
        run.state.count += 1
        await run.say("counted")

    def user(request: Request) -> str:
        return "ada"

    endpoint = AGUIEndpoint(agent, storage=MemoryStorage(), state=Board, authenticate=user)
    question = {"id": "m1", "role": "user", "content": "hi"}
    body = {"threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
            "messages": [question], "forwardedProps": {}}  # fmt: skip
    transport = httpx.ASGITransport(app=endpoint)
    async with httpx.AsyncClient(transport=transport, base_url="http://agui.test") as client:
        reply = await client.post("/", json=body, headers={"accept": "text/event-stream"})
    assert reply.status_code == 200 and "RUN_FINISHED" in reply.text

    spans = telemetry.spans.get_finished_spans()
    (run,) = [span for span in spans if span.name == "agent_state.agui.run"]
    assert run.parent is None and dict(run.attributes or {}) == {"http.request.method": "POST"}
    storage = [span for span in spans if span is not run]
    assert storage and all(span.name.startswith("agents.storage.") for span in storage)
    assert all(span.parent is not None and span.parent.span_id == run.context.span_id
               for span in storage)  # fmt: skip
    assert {span.name for span in storage} == {"agents.storage.read", "agents.storage.write"}
