"""The queue's hand-off: a turn leaving hands the next turn of its conversation what it just
committed, so that turn reads nothing it already knows; every guarantee stays (real stores)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agent_state import (
    Activity,
    AgentApplication,
    TurnContext,
    TurnState,
    conversation_key,
    open_storage,
)
from agent_state.backends import Storage, StoreItem
from tests.stores import STORES

CONVERSATION = conversation_key("test", "c1")


def message(i: int, *, user: str = "ada", activity_id: str | None = None) -> dict[str, Any]:
    activity: dict[str, Any] = {"type": "message", "channelId": "test", "text": f"hi {i}",
                                "from": {"id": user}, "conversation": {"id": "c1"}}  # fmt: skip
    if activity_id is not None:
        activity["id"] = activity_id
    return activity


@pytest.fixture(params=["memory", "file", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return STORES[request.param](str(tmp_path))


@pytest.fixture
async def store(url: str) -> AsyncIterator[Storage]:
    storage = open_storage(url)
    yield storage
    await storage.close()


@pytest.fixture(params=["memory", "redis"])
async def atomic_store(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Storage]:
    """The stores whose write batches are atomic: a commit there hands on the whole read."""
    storage = open_storage(STORES[request.param](str(tmp_path)))
    assert storage.atomic_batches
    yield storage
    await storage.close()


def count_reads(storage: Storage) -> list[int]:
    """Count the storage reads made through this very storage object."""
    reads = [0]
    read = storage.read

    async def counted(keys: Any) -> dict[str, StoreItem]:
        reads[0] += 1
        return await read(keys)

    storage.read = counted  # type: ignore[method-assign]
    return reads


def after_writes(storage: Storage, then: Callable[[int], Awaitable[None]]) -> None:
    """Run `then(n)` right after the storage's n-th write returned (from 1)."""
    write = storage.write
    done = [0]

    async def hooked(*args: Any, **kwargs: Any) -> dict[str, str]:
        etags = await write(*args, **kwargs)
        done[0] += 1
        await then(done[0])
        return etags

    storage.write = hooked  # type: ignore[method-assign]


def counter(storage: Storage, ran: list[int] | None = None) -> AgentApplication:
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        if ran is not None:
            ran.append(ctx.attempt)
        n = state.get("conversation.count", 0) + 1
        await asyncio.sleep(0)  # let the other turns arrive and queue (memory never suspends)
        state["conversation:count"] = n
        state["user:turns"] = state.get("user.turns", 0) + 1
        await ctx.send(f"count {n}")

    return app


async def stored(storage: Storage, key: str) -> dict[str, Any]:
    return (await storage.read([key]))[key].value


async def test_a_queued_chain_of_changed_turns_reads_the_storage_only_for_its_first_two(
    atomic_store: Storage,
) -> None:
    app = counter(atomic_store)
    reads = count_reads(atomic_store)
    replies = await asyncio.gather(
        *(app.process(message(i, activity_id=f"a{i}")) for i in range(20))
    )
    # the first turn waited for nobody, so it carries nothing (an uncontended turn pays
    # nothing for the hand-off); the second read, and each next one started from its
    # predecessor's commit
    assert reads[0] == 2
    assert [r[0].text for r in replies] == [f"count {i}" for i in range(1, 21)]
    assert (await stored(atomic_store, CONVERSATION))["count"] == 20
    assert (await stored(atomic_store, "test/users/ada"))["turns"] == 20


async def test_a_queued_chain_of_read_only_turns_reads_the_storage_only_for_its_first_two(
    store: Storage,
) -> None:
    await store.write({CONVERSATION: StoreItem({"topic": "x"}, None)})
    app = AgentApplication(store, app_name="bot")

    @app.message()
    async def read_only(ctx: TurnContext, state: TurnState) -> None:
        await asyncio.sleep(0)  # let the other turns arrive and queue
        await ctx.send(str(state.get("conversation.topic")))

    reads = count_reads(store)
    replies = await asyncio.gather(*(app.process(message(i)) for i in range(10)))
    assert reads[0] == 2  # nothing written: each waiting turn hands on the read it started from
    assert [r[0].text for r in replies] == ["x"] * 10


async def test_a_write_from_another_process_between_two_queued_turns_is_not_lost(
    store: Storage, url: str
) -> None:
    shared = url != "memory://"  # memory: the other writer is a job on the same store
    other = open_storage(url) if shared else store

    async def foreign_increment(n: int) -> None:
        if n == 2:  # right after the second turn's commit, before the next turn starts
            item = (await other.read([CONVERSATION]))[CONVERSATION]
            value = {**item.value, "count": item.value["count"] + 100}
            await other.write({CONVERSATION: StoreItem(value, item.etag)})

    ran: list[int] = []
    app = counter(store, ran)
    after_writes(store, foreign_increment)
    replies = await asyncio.gather(
        *(app.process(message(i, activity_id=f"a{i}")) for i in range(3))
    )
    assert (await stored(store, CONVERSATION))["count"] == 103  # no update lost
    assert [r[0].text for r in replies] == ["count 1", "count 2", "count 103"]
    # where the turn after it started from the second turn's commit, it ran again on a fresh
    # read (a file commit hands on only what it wrote: that turn read the store)
    assert ran.count(2) == (1 if store.atomic_batches else 0)
    if shared:
        await other.close()


async def test_a_redelivery_queued_behind_its_first_delivery_gets_the_first_replies(
    atomic_store: Storage,
) -> None:
    ran: list[int] = []
    app = counter(atomic_store, ran)
    reads = count_reads(atomic_store)
    _, first, again = await asyncio.gather(
        app.process(message(0, activity_id="before")),
        app.process(message(1, activity_id="same")),
        app.process(message(1, activity_id="same")),
    )
    assert [r.text for r in again] == [r.text for r in first] == ["count 2"]
    assert ran == [1, 1]  # the evidence travelled in the handed-on document: no third run
    assert reads[0] == 2  # the turn that waited for nobody's and the first delivery's
    assert (await stored(atomic_store, CONVERSATION))["count"] == 2


async def test_a_failed_turn_hands_nothing_on(atomic_store: Storage) -> None:
    app = AgentApplication(atomic_store, app_name="bot")

    @app.message()
    async def maybe_fail(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:count"] = state.get("conversation.count", 0) + 1
        await asyncio.sleep(0)  # let the other turns arrive and queue
        if ctx.activity.text == "hi 2":
            raise RuntimeError("handler failed")

    reads = count_reads(atomic_store)
    results = await asyncio.gather(
        *(app.process(message(i, activity_id=f"a{i}")) for i in range(4)), return_exceptions=True
    )
    assert isinstance(results[2], RuntimeError)
    # the first two turns read the store, the failed third started from the second's commit,
    # and the fourth read the store again
    assert reads[0] == 3
    assert (await stored(atomic_store, CONVERSATION))["count"] == 3


async def test_the_next_turn_shares_no_object_with_the_turn_before(atomic_store: Storage) -> None:
    app = AgentApplication(atomic_store, app_name="bot")
    leaked: list[list[int]] = []

    @app.message()
    async def append(ctx: TurnContext, state: TurnState) -> None:
        items = state.get("conversation.items")
        if items is None:
            state.set("conversation.items", [])
            items = state.get("conversation.items")
        items.append(len(items))
        leaked.append(items)
        await asyncio.sleep(0)  # let the other turns arrive and queue
        await ctx.send(str(items))

    async def edit_the_leaked_list(n: int) -> None:
        leaked[-1].append(-1)  # after the commit, before the next turn starts from it

    after_writes(atomic_store, edit_the_leaked_list)
    replies = await asyncio.gather(
        *(app.process(message(i, activity_id=f"a{i}")) for i in range(3))
    )
    assert [r[0].text for r in replies] == ["[0]", "[0, 1]", "[0, 1, 2]"]
    assert (await stored(atomic_store, CONVERSATION))["items"] == [0, 1, 2]


async def test_a_bucket_changed_by_another_writer_while_a_turn_waits_costs_no_rerun(
    atomic_store: Storage,
) -> None:
    app_key = "app/bot"
    ran: list[int] = []
    app = AgentApplication(atomic_store, app_name="bot")

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.attempt)
        n = state.get("conversation.count", 0) + 1
        await asyncio.sleep(0)  # the other turns queue behind this one
        if n == 2:  # another writer changes the app bucket, which no turn uses
            await atomic_store.write({app_key: StoreItem({"flag": True}, None)})
        state["conversation:count"] = n

    await asyncio.gather(*(app.process(message(i, activity_id=f"a{i}")) for i in range(3)))
    assert (await stored(atomic_store, CONVERSATION))["count"] == 3
    assert (await stored(atomic_store, app_key)) == {"flag": True}
    assert ran == [1, 1, 1]  # the commit's check of the unused bucket failed; its write went on


PATIENCE = 10.0
"""Seconds a test waits for the queued turns' reads before it fails (they start at once)."""


class HeldFirstTurn:
    """A counting bot whose first turn (of user `first`) stays open until `release`, so that
    turns `queue`d meanwhile wait behind it; every storage read is recorded in `seen`."""

    def __init__(self, storage: Storage, *, prefetches: int) -> None:
        """`prefetches`: how many queued turns read while they wait (`prefetched` waits)."""
        self.gate, self.entered, self.reached = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.seen: list[list[str]] = []
        self.app = AgentApplication(storage, app_name="bot")
        self.tasks: list[asyncio.Task[list[Activity]]] = []
        read = storage.read

        async def recorded(keys: Any) -> dict[str, StoreItem]:
            self.seen.append(list(keys))
            if len(self.seen) == 1 + prefetches:  # the first turn's load, then the prefetches
                self.reached.set()
            return await read(keys)

        storage.read = recorded  # type: ignore[method-assign]

        @self.app.message()
        async def count(ctx: TurnContext, state: TurnState) -> None:
            if ctx.activity.from_property is not None and ctx.activity.from_property.id == "first":
                self.entered.set()
                await self.gate.wait()
            state["conversation:count"] = state.get("conversation.count", 0) + 1
            state["user:turns"] = state.get("user.turns", 0) + 1
            state["session:attempts"] = [*state.get("session.attempts", []), ctx.attempt]

    async def start(self) -> None:
        """Start the first turn and wait until it runs its handler."""
        self.queue(0, "first")
        await self.entered.wait()

    def queue(self, number: int, user: str) -> asyncio.Task[list[Activity]]:
        """Start a turn of `user` (activity id `a{number}`)."""
        message_of = message(number, user=user, activity_id=f"a{number}")
        self.tasks.append(asyncio.create_task(self.app.process(message_of)))
        return self.tasks[-1]

    async def prefetched(self) -> None:
        """Wait until the queued turns started their reads (fail after PATIENCE seconds)."""
        await asyncio.wait_for(self.reached.wait(), PATIENCE)

    async def release(self) -> None:
        """Let the first turn finish; wait for every turn, raising what one that was not
        cancelled raised."""
        self.gate.set()
        outcomes = await asyncio.gather(*self.tasks, return_exceptions=True)
        for task, outcome in zip(self.tasks, outcomes, strict=True):
            if isinstance(outcome, BaseException) and not task.cancelled():
                raise outcome


def own_keys(user: str) -> set[str]:
    """The user's and their session's bucket keys in conversation c1 of the `bot` app."""
    return {f"test/users/{user}", f"test/conversations/c1/users/{user}/agents/bot"}


async def test_queued_turns_of_other_users_read_their_own_buckets_while_they_wait(
    atomic_store: Storage,
) -> None:
    others = [f"u{i}" for i in range(5)]
    held = HeldFirstTurn(atomic_store, prefetches=len(others))
    await held.start()
    for number, user in enumerate(others, start=1):
        held.queue(number, user)
    await held.prefetched()  # each queued turn starts a read while the first turn runs
    before = len(held.seen)
    await held.release()
    for user, keys in zip(others, held.seen[1:before], strict=True):
        assert own_keys(user) <= set(keys), (user, keys)
    # no turn read its own buckets again once it ran: each started from its prefetch and
    # from what the turn before it handed on; only the first of them read the shared buckets,
    # since the first turn waited for nobody and so carries nothing
    assert held.seen[before:] == [[CONVERSATION, "app/bot"]]
    assert (await stored(atomic_store, CONVERSATION))["count"] == 1 + len(others)
    for user in others:
        assert (await stored(atomic_store, f"test/users/{user}"))["turns"] == 1
        session = await stored(atomic_store, f"test/conversations/c1/users/{user}/agents/bot")
        assert session["attempts"] == [1]  # no prefetched document was stale: no re-run


async def test_a_queued_turn_does_not_prefetch_what_a_turn_ahead_of_it_reads(
    atomic_store: Storage,
) -> None:
    held = HeldFirstTurn(atomic_store, prefetches=1)
    await held.start()
    held.queue(1, "u1")
    held.queue(2, "first")
    await held.prefetched()  # u1's prefetch; the second turn of `first` queued before it
    waiting = list(held.seen)
    await held.release()
    assert not any(own_keys("first") & set(keys) for keys in waiting[1:]), waiting
    assert any(own_keys("first") <= set(keys) for keys in held.seen[len(waiting) :]), held.seen
    assert (await stored(atomic_store, "test/users/first"))["turns"] == 2
    session = await stored(atomic_store, "test/conversations/c1/users/first/agents/bot")
    assert session["attempts"] == [1, 1]  # read after the first turn's commit: no re-run
    assert (await stored(atomic_store, CONVERSATION))["count"] == 3


async def test_a_prefetched_document_changed_by_another_writer_is_a_conflict_and_a_rerun(
    atomic_store: Storage,
) -> None:
    user_key = "test/users/u1"
    await atomic_store.write({user_key: StoreItem({"turns": 10}, None)})
    held = HeldFirstTurn(atomic_store, prefetches=1)
    await held.start()
    held.queue(1, "u1")
    await held.prefetched()
    found = await atomic_store.read([user_key])  # another writer, after the prefetch
    await atomic_store.write({user_key: StoreItem({"turns": 20}, found[user_key].etag)})
    await held.release()
    assert (await stored(atomic_store, user_key))["turns"] == 21  # nothing lost
    session = await stored(atomic_store, "test/conversations/c1/users/u1/agents/bot")
    assert session["attempts"] == [2]


async def test_a_queued_turn_cancelled_while_it_waits_leaves_the_queue_working(
    atomic_store: Storage,
) -> None:
    held = HeldFirstTurn(atomic_store, prefetches=2)
    await held.start()
    dropped = held.queue(1, "u1")
    held.queue(2, "u2")
    await held.prefetched()
    dropped.cancel()
    await held.release()
    with pytest.raises(asyncio.CancelledError):
        await dropped
    assert (await stored(atomic_store, CONVERSATION))["count"] == 2
    assert (await atomic_store.read(["test/users/u1"])) == {}
    assert (await stored(atomic_store, "test/users/u2"))["turns"] == 1
