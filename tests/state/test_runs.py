"""Runs: accepted before they run, a terminal record however they end, resubmission-safe,
cancellation of children; and the explicit choice of a model call's history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_state import (
    HistoryError,
    MissingIdError,
    RunConflictError,
    RunStateError,
    TurnIds,
    accept_run,
    cancel_run,
    literal,
    model_messages,
    next_turn,
    open_run,
    open_storage,
    open_turn,
    session_key,
)
from agent_state.backends import FormatError, MemoryStorage, Storage, StoreItem
from tests.stores import STORES

IDS = TurnIds(channel_id="r", user_id="ada", conversation_id="c1", app_name="runs")
OTHER = TurnIds(channel_id="r", user_id="grace", conversation_id="c1", app_name="runs")
RUNS = f"{session_key('r', 'c1', 'ada', agent='runs')}/runs"


def msg(ident: str, role: str = "user") -> dict[str, Any]:
    return {"id": ident, "role": role, "content": ident}


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


async def record(storage: Storage, run_id: str) -> dict[str, Any]:
    return (await storage.read([f"{RUNS}/{run_id}"]))[f"{RUNS}/{run_id}"].value


async def complete(storage: Storage, run_id: str, history: Any, *added: dict[str, Any]) -> Any:
    run = await accept_run(storage, IDS, run_id, {"ask": run_id}, history=history)
    async with open_run(storage, run) as state:
        seen = await model_messages(state, run)
        await state.history.append(*added)
        state["temp:result"] = {"seen": [m["id"] for m in seen]}
    return seen


async def test_two_turns_build_each_model_call_from_the_last_completed_run(
    storage: Storage,
) -> None:
    system = [msg("sys", "system")]
    first = await complete(storage, "r1", literal([]), msg("q1"), msg("t1", "reasoning"),
                           msg("a1", "assistant"))  # fmt: skip
    assert first == []
    second = await complete(storage, "r2", next_turn("r1", system, [msg("q2")]), msg("a2"))
    assert [m["id"] for m in second] == ["sys", "q1", "t1", "a1", "q2"]
    stored = await record(storage, "r2")
    assert stored["status"] == "completed" and stored["messages"] == ["a2"]
    assert stored["request"] == {"ask": "r2"}
    assert stored["result"] == {"seen": ["sys", "q1", "t1", "a1", "q2"]}
    third = await complete(storage, "r3", next_turn("r2").without_prior_reasoning())
    assert [m["id"] for m in third] == ["q1", "a1", "a2"]
    fourth = await complete(storage, "r4", next_turn("r3"))  # the choice sticks
    assert [m["id"] for m in fourth] == ["q1", "a1", "a2"]  # r3 added nothing itself


async def test_resubmission_returns_the_accepted_run_and_another_input_conflicts(
    storage: Storage,
) -> None:
    run = await accept_run(storage, IDS, "same", {"text": "hi"}, history=literal([]))
    again = await accept_run(storage, IDS, "same", {"text": "hi"}, history=literal([]))
    assert not run.resubmitted and again.resubmitted and again.status == "accepted"
    with pytest.raises(RunConflictError):
        await accept_run(storage, IDS, "same", {"text": "other"}, history=literal([]))
    async with open_run(storage, run) as state:
        await state.history.append(msg("once"))
    done = await accept_run(storage, IDS, "same", {"text": "hi"}, history=literal([]))
    assert done.resubmitted and done.status == "completed"
    with pytest.raises(RunStateError):  # a completed run does not run again
        async with open_run(storage, done):
            pass
    async with open_turn(storage, IDS) as state:
        assert [m["id"] for m in await state.history.last(5)] == ["once"]


async def test_a_failed_or_cancelled_run_leaves_a_terminal_record() -> None:
    storage = MemoryStorage()
    run = await accept_run(storage, IDS, "boom", {}, history=literal([]))
    assert (await record(storage, "boom"))["status"] == "accepted"
    with pytest.raises(ValueError):
        async with open_run(storage, run) as state:
            await state.history.append(msg("never"))
            raise ValueError("the model failed")
    stored = await record(storage, "boom")
    assert stored["status"] == "failed" and "the model failed" in stored["error"]
    async with open_turn(storage, IDS) as state:
        assert await state.history.count() == 0  # nothing of the failed run
    slow = await accept_run(storage, IDS, "slow", {}, history=literal([]))
    started = asyncio.Event()

    async def body() -> None:
        async with open_run(storage, slow):
            started.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(body())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await record(storage, "slow"))["status"] == "cancelled"


async def test_cancelling_a_parent_marks_its_accepted_children() -> None:
    storage = MemoryStorage()
    await accept_run(storage, IDS, "parent", {}, history=literal([]))
    child = await accept_run(storage, IDS, "child", {}, history=literal([]), parent="parent")
    done = await accept_run(storage, IDS, "done", {}, history=literal([]), parent="parent")
    async with open_run(storage, done):
        pass
    await cancel_run(storage, IDS, "parent")
    parent = await record(storage, "parent")
    assert parent["status"] == "cancelled" and parent["children"] == ["child", "done"]
    assert (await record(storage, "child"))["status"] == "cancelled"
    assert (await record(storage, "done"))["status"] == "completed"
    with pytest.raises(RunStateError):
        async with open_run(storage, child):
            pass
    with pytest.raises(RunStateError):
        await cancel_run(storage, IDS, "parent")


async def test_the_history_must_be_chosen_and_follows_the_rules() -> None:
    storage = MemoryStorage()
    with pytest.raises(HistoryError, match="choose"):
        await accept_run(storage, IDS, "x", {}, history=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await accept_run(storage, IDS, "x", {})  # type: ignore[call-arg]
    with pytest.raises(HistoryError):
        next_turn("r", fresh_messages=[msg("s", "system")])
    with pytest.raises(HistoryError):
        next_turn("r", system_messages=[msg("u")])
    with pytest.raises(HistoryError):  # a stateless client's history is untrusted input
        literal([{"id": "x", "role": "robot"}])
    with pytest.raises(RunStateError):  # no such run
        await accept_run(storage, IDS, "x", {}, history=next_turn("missing"))
    await accept_run(storage, IDS, "open", {}, history=literal([]))
    with pytest.raises(RunStateError):  # not completed
        await accept_run(storage, IDS, "y", {}, history=next_turn("open"))
    await complete(storage, "mine", literal([]), msg("m"))
    with pytest.raises(RunStateError):  # another session cannot inherit it
        await accept_run(storage, OTHER, "z", {}, history=next_turn("mine"))
    with pytest.raises(RunStateError):
        await accept_run(storage, IDS, "p", {}, history=literal([]), parent="nobody")
    no_session = TurnIds(channel_id="r", conversation_id="c1", app_name="runs")  # no user
    with pytest.raises(MissingIdError):  # a session-less run inherits no one's history
        await accept_run(storage, no_session, "w", {}, history=next_turn("mine"))


async def test_a_run_record_of_another_format_is_refused(storage: Storage) -> None:
    await storage.write({f"{RUNS}/old": StoreItem({"format": 0, "status": "done"})})
    with pytest.raises(FormatError):
        await accept_run(storage, IDS, "old", {}, history=literal([]))
