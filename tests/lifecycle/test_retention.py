"""Retention that cascades: a session's bucket, history, runs and AG-UI thread documents share
one expiry on every backend, a pending run holds them, and a session touched again lives on
whole (docs/lifecycle.md)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from agent_state import (
    SessionState,
    TurnIds,
    TurnState,
    accept_run,
    execute_run,
    literal,
    open_storage,
    open_turn,
)
from agent_state.agui._thread_input import Owner, SentState
from agent_state.backends import MemoryStorage, Storage, StoreItem
from tests.stores import STORES

TTL = 3600.0
LEASE = 5 * TTL


class Session(SessionState):
    """The session scope with a TTL."""

    ttl = TTL


IDS = TurnIds("web", "ada", "c1", app_name="bot")
SCOPES = [Session]


async def turn(storage: Storage, n: int, *, messages: int = 1) -> None:
    """A turn that counts in the session, appends `messages` messages and writes the thread's
    sent-state and owner records (what an AG-UI run stores)."""
    async with open_turn(storage, IDS, scopes=SCOPES) as state:
        state["turns"] = state.get("turns", 0) + 1
        await state.history.append(
            *({"id": f"m{n}-{i}", "role": "user", "content": "hi"} for i in range(messages))
        )
        session = str(state.session.key)
        conversation = str(state.conversation.key)
        sent, owner = await state.fetch(
            {f"{session}/agui": SentState, f"{conversation}/agui-owner/bot": Owner}
        )
        sent.value.update(format=1, sent={"turns": n}, last=None, pending={})
        owner.value.update(format=1, user="ada")


async def session_documents(storage: Storage) -> dict[str, float | None]:
    """Every stored document of the session (its bucket, everything under it, the thread's
    owner record): key -> seconds left (None: for good)."""
    async with open_turn(storage, IDS, scopes=SCOPES) as state:
        session, conversation = str(state.session.key), str(state.conversation.key)
        state.discard()
    keys = [key async for key in storage.list(session)]
    keys.append(f"{conversation}/agui-owner/bot")
    return {key: item.ttl for key, item in (await storage.read(keys)).items()}


async def run_once(storage: Storage, run_id: str, clock: Callable[[], float] = time.time) -> None:
    """Accept a run of the session and execute it to its end."""
    run = await accept_run(storage, IDS, run_id, {"n": run_id}, history=literal([]), clock=clock)

    async def body(state: TurnState, attempt: int) -> None:
        return None

    await execute_run(storage, run, body, clock=clock)


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    async with open_storage(STORES[request.param](str(tmp_path))) as store:
        yield store


async def test_every_document_of_a_session_expires_with_its_bucket(storage: Storage) -> None:
    await turn(storage, 0, messages=40)  # a full history page, its tail, 40 id entries
    await run_once(storage, "r1")
    await turn(storage, 1)
    found = await session_documents(storage)
    for part in ("/history/pages/", "/history/ids/", "/runs/", "/agui", "/agui-owner/"):
        assert any(part in key for key in found), part
    assert len(found) > 45
    bucket = found[next(key for key in found if key.endswith("/agents/bot"))]
    assert bucket is not None and TTL < bucket <= 2 * TTL + 2
    assert all(left is not None and abs(left - bucket) < 3 for left in found.values()), found


async def test_a_due_session_is_renewed_whole_in_one_save(storage: Storage) -> None:
    await turn(storage, 0, messages=40)
    await run_once(storage, "r1")
    found = await session_documents(storage)
    bucket_key = next(key for key in found if key.endswith("/agents/bot"))
    (item,) = (await storage.read([bucket_key])).values()
    await storage.write({bucket_key: StoreItem(item.value, item.etag, ttl=60)})  # nearly over
    await turn(storage, 1)
    renewed = await session_documents(storage)
    assert set(found) < set(renewed)
    assert all(left is not None and 2 * TTL - 5 < left <= 2 * TTL + 2 for left in renewed.values())


async def test_a_pending_run_holds_every_document_of_its_session(storage: Storage) -> None:
    await turn(storage, 0, messages=40)
    await accept_run(storage, IDS, "r1", {}, history=literal([]), lease=LEASE)
    found = await session_documents(storage)
    assert len(found) > 45 and any("/runs/r1" in key for key in found)
    assert all(left is not None and LEASE - 3 < left <= LEASE + TTL + 3 for left in found.values())


class Clock:
    """The memory store's clock, moved by the test; `time` for the runs' leases."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def raw_keys(storage: MemoryStorage) -> set[str]:
    """What the memory store holds, expired documents not dropped yet included."""
    return set(storage._entries)


async def drop_expired(storage: MemoryStorage) -> None:
    """Writes of an unrelated key: each drops expired documents, a bounded number at a time."""
    for n in range(100):
        await storage.write({f"other/{uuid.uuid4().hex}": StoreItem({"n": n})})


async def test_after_the_retention_passes_nothing_of_the_session_is_stored() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    await turn(storage, 0, messages=40)
    await run_once(storage, "r1", clock=clock)
    assert len(await session_documents(storage)) > 45
    clock.now += 2 * TTL + 1
    await drop_expired(storage)
    assert {
        k for k in raw_keys(storage) if not k.startswith("other/") and "/sessions/" not in k
    } == set()


async def test_a_pending_run_holds_its_session() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    await turn(storage, 0, messages=40)
    await accept_run(storage, IDS, "r1", {}, history=literal([]), clock=clock, lease=LEASE)
    before = await session_documents(storage)
    clock.now += 3 * TTL  # past the session's own retention, within the run's lease
    await drop_expired(storage)
    assert await session_documents(storage) == {k: v and v - 3 * TTL for k, v in before.items()}
    clock.now += LEASE
    await drop_expired(storage)
    assert not await session_documents(storage)


async def test_a_session_touched_again_lives_on_whole() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock)
    await turn(storage, 0, messages=40)
    clock.now += 1.5 * TTL
    await turn(storage, 1)
    clock.now += 1.5 * TTL  # past the first turn's documents' first expiry
    await drop_expired(storage)
    async with open_turn(storage, IDS, scopes=SCOPES) as state:
        assert state["turns"] == 2
        assert [m["id"] for m in await state.history.first(41)] == [
            *(f"m0-{i}" for i in range(40)),
            "m1-0",
        ]
    clock.now += 2 * TTL + 1
    await drop_expired(storage)
    assert not await session_documents(storage)
