"""Retention that cascades: a session's bucket, history, runs and AG-UI thread documents share
one expiry on every backend, a pending run holds them, and a session touched again lives on
whole (docs/lifecycle.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from agent_state import (
    SessionState,
    TurnIds,
    TurnState,
    UnknownUserError,
    accept_run,
    execute_run,
    export_user,
    forget_user,
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


async def turn(
    storage: Storage, n: int, *, messages: int = 1, scope: type[SessionState] = Session
) -> None:
    """A turn that counts in the session, appends `messages` messages and writes the thread's
    sent-state and owner records (what an AG-UI run stores)."""
    async with open_turn(storage, IDS, scopes=[scope]) as state:
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
    """The clock the store decides expiry on (`MemoryStorage(clock=)`, `Storage.clock` for the
    file and Blob stores, which expire documents when a read or a listing meets them), moved
    by the test; also the runs' lease clock."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


CLOCKED = ["memory", "file", "blob"]
"""The stores whose expiry our code decides: the tests move their clock."""


@pytest.fixture(params=CLOCKED)
async def clocked(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Storage, Clock]]:
    """A fresh store of each kind whose expiry our code decides, and the clock it decides on."""
    clock = Clock()
    if request.param == "memory":
        async with MemoryStorage(clock=clock) as store:
            yield store, clock
        return
    async with open_storage(STORES[request.param](str(tmp_path))) as store:
        store.clock = clock
        yield store, clock


async def sweep(storage: Storage) -> list[str]:
    """Run what removes expired documents: a listing of the store (file, Blob); on memory,
    writes of an unrelated key (each drops expired documents, a bounded number at a time)
    too. The keys listed (the unrelated ones left out)."""
    if isinstance(storage, MemoryStorage):
        for n in range(100):
            await storage.write({f"other/{uuid.uuid4().hex}": StoreItem({"n": n})})
    return [key async for key in storage.list("") if not key.startswith("other/")]


async def stored_keys(storage: Storage, clock: Clock, at: float) -> list[str]:
    """The keys the store still holds when its clock is set back to `at` (before the
    expiries): what a sweep only hid rather than removed shows again."""
    now, clock.now = clock.now, at
    try:
        return [key async for key in storage.list("") if not key.startswith("other/")]
    finally:
        clock.now = now


async def test_after_the_retention_passes_nothing_of_the_session_is_stored(
    clocked: tuple[Storage, Clock],
) -> None:
    storage, clock = clocked
    start = clock.now
    await turn(storage, 0, messages=40)
    await run_once(storage, "r1", clock=clock)
    assert len(await session_documents(storage)) > 45
    assert "web/users/ada/sessions/c1" in await stored_keys(storage, clock, start)
    clock.now += 2 * TTL + 1
    assert await sweep(storage) == []
    assert await stored_keys(storage, clock, start) == []  # the user's index entry too


async def test_a_pending_run_holds_its_session(clocked: tuple[Storage, Clock]) -> None:
    storage, clock = clocked
    await turn(storage, 0, messages=40)
    await accept_run(storage, IDS, "r1", {}, history=literal([]), clock=clock, lease=LEASE)
    before = await session_documents(storage)
    clock.now += 3 * TTL  # past the session's own retention, within the run's lease
    await sweep(storage)
    assert await session_documents(storage) == {k: v and v - 3 * TTL for k, v in before.items()}
    clock.now += LEASE
    await sweep(storage)
    assert not await session_documents(storage)


async def test_a_session_touched_again_lives_on_whole(clocked: tuple[Storage, Clock]) -> None:
    storage, clock = clocked
    await turn(storage, 0, messages=40)
    clock.now += 1.5 * TTL
    await turn(storage, 1)
    clock.now += 1.5 * TTL  # past the first turn's documents' first expiry
    await sweep(storage)
    async with open_turn(storage, IDS, scopes=SCOPES) as state:
        assert state["turns"] == 2
        assert [m["id"] for m in await state.history.first(41)] == [
            *(f"m0-{i}" for i in range(40)),
            "m1-0",
        ]
    clock.now += 2 * TTL + 1
    await sweep(storage)
    assert not await session_documents(storage)


async def test_the_index_entry_lives_as_long_as_the_longest_lived_session_it_indexes(
    clocked: tuple[Storage, Clock],
) -> None:
    storage, clock = clocked
    await turn(storage, 0, messages=3)
    other = TurnIds("web", "ada", "c1", app_name="other")  # an agent whose sessions never expire
    async with open_turn(storage, other) as state:
        state["topic"] = "kept"
    clock.now += 2 * TTL + 1
    assert await sweep(storage) == [
        "web/conversations/c1/users/ada/agents/other",
        "web/users/ada/sessions/c1",
    ]
    lines = [orjson.loads(line) async for line in export_user(storage, "web", "ada")]
    assert [line["key"] for line in lines] == [
        "web/conversations/c1/users/ada/agents/other",
        "web/users/ada/sessions/c1",
    ]


async def test_export_leaves_out_and_forget_removes_an_entry_whose_sessions_expired(
    clocked: tuple[Storage, Clock],
) -> None:
    storage, clock = clocked
    await turn(storage, 0, messages=3)
    entry = "web/users/ada/sessions/c2"  # an entry without a TTL, as an older version wrote
    await storage.write({entry: StoreItem({"session": "web/conversations/c2/users/ada"})})
    lines = [orjson.loads(line) async for line in export_user(storage, "web", "ada")]
    keys = [line["key"] for line in lines]
    assert "web/users/ada/sessions/c1" in keys and entry not in keys
    clock.now += 2 * TTL + 1
    with pytest.raises(UnknownUserError):
        _ = [line async for line in export_user(storage, "web", "ada")]
    report = await forget_user(storage, "web", "ada")
    assert report.documents == 1
    assert await sweep(storage) == []


NATIVE = ["redis", "redis-cluster", "cosmos"]
"""The stores that remove expired documents themselves, on their own clock."""
SHORT = 3.0
"""The TTL of `ShortSession`: seconds, on the stores' real clocks."""
WITHIN = 30.0
"""Seconds a poll waits for a store's expiry before the test fails (Cosmos DB removes an
item up to about two seconds past its TTL)."""


class ShortSession(SessionState):
    """A session scope whose TTL passes while a test waits."""

    ttl = SHORT


@pytest.fixture(params=NATIVE)
async def native(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    async with open_storage(STORES[request.param](str(tmp_path))) as store:
        yield store


async def witness(storage: Storage, ttl: float) -> Callable[[], Awaitable[bool]]:
    """A document of its own living `ttl` seconds from now: whether the store removed it says
    that the store's expiry passed that time."""
    key = f"web/users/witness-{uuid.uuid4().hex}"
    await storage.write({key: StoreItem({"ttl": ttl}, ttl=ttl)})

    async def gone() -> bool:
        return not await storage.read([key])

    return gone


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll `condition` until it holds; fail once it did not within `WITHIN` seconds."""
    deadline = time.monotonic() + WITHIN
    while not await condition():
        assert time.monotonic() < deadline, f"not within {WITHIN} s: {what}"
        await asyncio.sleep(0.1)


async def nothing_of_the_session(storage: Storage) -> bool:
    """Whether neither the session's documents nor the user's index entry are stored."""
    keys = [key async for key in storage.list("web/") if "witness" not in key]
    return not keys and not await session_documents(storage)


async def test_after_a_native_ttl_passes_nothing_of_the_session_is_stored(
    native: Storage,
) -> None:
    await turn(native, 0, messages=3, scope=ShortSession)
    found = await session_documents(native)
    assert len(found) > 5 and all(left is not None and left <= 2 * SHORT for left in found.values())
    assert [key async for key in native.list("web/users/")] == ["web/users/ada/sessions/c1"]
    await until(lambda: nothing_of_the_session(native), "the session and its entry expired")


async def test_a_pending_run_holds_its_session_on_a_native_ttl(native: Storage) -> None:
    await turn(native, 0, messages=3, scope=ShortSession)
    lease = 4 * SHORT
    await accept_run(native, IDS, "r1", {}, history=literal([]), lease=lease)
    before = set(await session_documents(native))
    past_the_session = await witness(native, 2 * SHORT + 1)
    await until(past_the_session, "the session's own retention passed")
    assert set(await session_documents(native)) == before  # held by the run's lease
    assert [key async for key in native.list("web/users/ada/")] == ["web/users/ada/sessions/c1"]
    await until(lambda: nothing_of_the_session(native), "the run's lease passed")


async def test_a_session_touched_again_lives_on_whole_on_a_native_ttl(native: Storage) -> None:
    await turn(native, 0, messages=3, scope=ShortSession)
    due = await witness(native, 1.5 * SHORT)  # less than the TTL left: the next save renews
    past_the_first_expiry = await witness(native, 2 * SHORT + 0.5)
    await until(due, "the session came due")
    await turn(native, 1, scope=ShortSession)
    await until(past_the_first_expiry, "the first turn's documents' first expiry passed")
    async with open_turn(native, IDS, scopes=[ShortSession]) as state:
        assert state["turns"] == 2
        assert [m["id"] for m in await state.history.first(4)] == ["m0-0", "m0-1", "m0-2", "m1-0"]
        state.discard()
    await until(lambda: nothing_of_the_session(native), "the renewed session expired")
