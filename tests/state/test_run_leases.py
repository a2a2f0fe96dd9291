"""Runs that always end and run once: an accepted run holds a lease (on an injected clock),
after which a resubmission takes it over or records it failed; a run already opened and not
finished is refused to a second opener unless recovery of a stale one is asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_state import (
    RunStateError,
    TurnIds,
    accept_run,
    open_run,
    open_storage,
    open_turn,
    session_key,
    thread,
)
from agent_state.backends import Storage
from tests.stores import STORES

IDS = TurnIds(channel_id="l", user_id="ada", conversation_id="c1", app_name="leases")
RUNS = f"{session_key('l', 'c1', 'ada', agent='leases')}/runs"
LEASE = 60.0


class Clock:
    """A clock the test moves by hand: no sleeps."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


async def record(storage: Storage, run_id: str) -> dict[str, Any]:
    value: dict[str, Any] = (await storage.read([f"{RUNS}/{run_id}"]))[f"{RUNS}/{run_id}"].value
    return value


async def count(storage: Storage) -> int:
    async with open_turn(storage, IDS) as state:
        state.discard()
        return await state.history.count()


async def test_a_run_never_opened_is_taken_over_by_a_resubmission_after_its_lease(
    storage: Storage,
) -> None:
    clock = Clock()
    await accept_run(storage, IDS, "r1", {"q": 1}, history=thread(), clock=clock, lease=LEASE)
    # the process died (or the store failed) before the run started: nobody opened it
    early = await accept_run(storage, IDS, "r1", {"q": 1}, history=thread(), clock=clock)
    assert early.resubmitted and early.status == "accepted"  # still under way, within the lease
    clock.now += LEASE
    late = await accept_run(storage, IDS, "r1", {"q": 1}, history=thread(), clock=clock)
    assert not late.resubmitted and late.status == "accepted"  # this submission runs it
    async with open_run(storage, late, clock=clock) as state:
        await state.history.append({"id": "m1", "role": "assistant", "content": "done"})
    assert (await record(storage, "r1"))["status"] == "completed"
    assert await count(storage) == 1


async def test_a_run_whose_opener_died_is_recorded_failed_after_its_lease(
    storage: Storage,
) -> None:
    clock = Clock()
    run = await accept_run(storage, IDS, "r2", {"q": 2}, history=thread(), clock=clock)
    dead = open_run(storage, run, clock=clock, lease=LEASE)
    state = await dead.__aenter__()  # opened, then its process died: never exited
    await state.history.append({"id": "lost", "role": "assistant", "content": "x"})
    assert (await record(storage, "r2"))["status"] == "accepted"
    clock.now += LEASE
    again = await accept_run(storage, IDS, "r2", {"q": 2}, history=thread(), clock=clock)
    assert again.resubmitted and again.status == "failed"
    stored = await record(storage, "r2")
    assert stored["status"] == "failed" and "lease" in stored["error"]
    assert await count(storage) == 0


async def test_a_second_opener_is_refused_unless_it_recovers_a_stale_run(
    storage: Storage,
) -> None:
    clock = Clock()
    first = await accept_run(storage, IDS, "r3", {"q": 3}, history=thread(), clock=clock)
    second = await accept_run(storage, IDS, "r3", {"q": 3}, history=thread(), clock=clock)
    ran: list[str] = []
    opened = open_run(storage, first, clock=clock, lease=LEASE)
    stale = await opened.__aenter__()
    ran.append("first")
    with pytest.raises(RunStateError, match="already opened"):
        async with open_run(storage, second, clock=clock):
            ran.append("second")
    with pytest.raises(RunStateError, match="lease still runs"):  # not stale yet
        async with open_run(storage, second, recover=True, clock=clock):
            ran.append("second")
    assert ran == ["first"] and (await record(storage, "r3"))["status"] == "accepted"
    clock.now += LEASE
    async with open_run(storage, second, recover=True, clock=clock) as state:
        ran.append("recovered")
        await state.history.append({"id": "m3", "role": "assistant", "content": "once"})
    await stale.history.append({"id": "late", "role": "assistant", "content": "stale"})
    with pytest.raises(RunStateError, match="taken over"):  # the stale opener commits nothing
        await opened.__aexit__(None, None, None)
    assert ran == ["first", "recovered"]
    assert (await record(storage, "r3"))["status"] == "completed"
    assert await count(storage) == 1
