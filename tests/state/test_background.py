"""Background access: read and edit by ids with conflict retry, and listing by channel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_state import (
    AppState,
    ConversationState,
    MissingIdError,
    SessionState,
    StateConflictError,
    TurnIds,
    UserState,
    app_key,
    conversation_key,
    edit_state,
    list_conversations,
    list_users,
    open_state,
    open_storage,
    open_user,
    read_state,
    session_key,
    user_key,
)
from agent_state.backends import MemoryStorage, Storage, StoreItem
from tests.state.conftest import CountingStorage
from tests.stores import STORES

ADA = TurnIds(channel_id="msteams", user_id="29:ada")
KEY = user_key("msteams", "29:ada")


async def seed(storage: CountingStorage, key: str, value: dict[str, Any]) -> None:
    await storage.write({key: StoreItem(value, None)})
    storage.writes.clear()


async def test_read_state_by_ids(storage: CountingStorage) -> None:
    await seed(storage, KEY, {"plan": "free"})
    user = await read_state(storage, UserState, ADA)
    assert isinstance(user, UserState) and user["plan"] == "free" and user.etag is not None
    ids = TurnIds(channel_id="c", conversation_id="k", user_id="u", app_name="bot")
    for cls in (ConversationState, SessionState, AppState):
        bucket = await read_state(storage, cls, ids)
        assert bucket.key == cls.key_for(ids) and len(bucket) == 0 and bucket.etag is None
    assert len(storage.reads) == 4


async def test_read_state_names_missing_ids(storage: CountingStorage) -> None:
    with pytest.raises(MissingIdError, match="user_id"):
        await read_state(storage, UserState, TurnIds(channel_id="c"))
    assert storage.reads == []


async def test_open_user_saves_on_exit(storage: CountingStorage) -> None:
    async with open_user(storage, "msteams", "29:ada") as user:
        user["plan"] = "pro"
    assert await storage.stored(KEY) == {"plan": "pro"}
    async with open_user(storage, "msteams", "29:ada") as user:
        assert user["plan"] == "pro"
    assert len(storage.writes) == 1  # an unchanged block writes nothing


async def test_open_state_does_not_save_when_the_block_fails(storage: CountingStorage) -> None:
    with pytest.raises(RuntimeError):
        async with open_user(storage, "msteams", "29:ada") as user:
            user["plan"] = "pro"
            raise RuntimeError("job failed")
    assert storage.writes == [] and await storage.stored(KEY) is None


async def test_two_concurrent_editors_both_land(storage: CountingStorage) -> None:
    """A real conflict: B reads, A writes, B's write fails, B re-reads and re-runs its edit."""
    await seed(storage, KEY, {"credits": 5})
    b_has_read, a_done = asyncio.Event(), asyncio.Event()
    runs_b = 0

    async def edit_a(user: UserState) -> None:
        await b_has_read.wait()
        user["plan"] = "pro"

    async def edit_b(user: UserState) -> None:
        nonlocal runs_b
        runs_b += 1
        user["credits"] = user["credits"] + 10
        if runs_b == 1:
            b_has_read.set()
            await a_done.wait()

    async def editor_a() -> None:
        await edit_state(storage, UserState, ADA, edit_a)
        a_done.set()

    _, edited = await asyncio.gather(editor_a(), edit_state(storage, UserState, ADA, edit_b))
    assert await storage.stored(KEY) == {"credits": 15, "plan": "pro"}
    assert runs_b == 2 and len(storage.writes) == 3  # A, B's failed write, B's retry
    assert edited["credits"] == 15 and edited.etag == (await storage.read([KEY]))[KEY].etag


async def test_edit_state_takes_a_sync_function(storage: CountingStorage) -> None:
    user = await edit_state(storage, UserState, ADA, lambda u: u.set("n", 0))
    assert user["n"] == 0 and await storage.stored(KEY) == {"n": 0}


async def test_open_state_rebases_the_block_onto_a_concurrent_write(
    storage: CountingStorage,
) -> None:
    await seed(storage, KEY, {"credits": 5, "plan": "free"})
    async with open_user(storage, "msteams", "29:ada") as billing:
        async with open_user(storage, "msteams", "29:ada") as other:
            other["credits"] = 50
        billing["plan"] = "pro"
    assert await storage.stored(KEY) == {"credits": 50, "plan": "pro"}
    assert len(storage.writes) == 3


async def test_open_state_refuses_to_overwrite_the_same_path(storage: CountingStorage) -> None:
    await seed(storage, KEY, {"plan": "free"})
    with pytest.raises(StateConflictError) as info:
        async with open_user(storage, "msteams", "29:ada") as billing:
            async with open_user(storage, "msteams", "29:ada") as other:
                other["plan"] = "team"
            billing["plan"] = "pro"
    assert info.value.paths == ["/plan"] and info.value.scopes == ["user"]
    assert await storage.stored(KEY) == {"plan": "team"}


async def test_open_state_refuses_to_rename_what_the_other_writer_edited(
    storage: CountingStorage,
) -> None:
    await seed(storage, KEY, {"draft": {"text": "v1"}})
    with pytest.raises(StateConflictError) as info:
        async with open_user(storage, "msteams", "29:ada") as publisher:
            publisher["published"] = publisher.pop("draft")
            async with open_user(storage, "msteams", "29:ada") as editor:
                editor["draft"] = {"text": "v2"}
    assert info.value.paths == ["/draft"]
    assert await storage.stored(KEY) == {"draft": {"text": "v2"}}


async def test_open_state_does_not_bring_back_a_deleted_document(storage: CountingStorage) -> None:
    await seed(storage, KEY, {"name": "Ada", "plan": "pro"})
    with pytest.raises(StateConflictError, match="user state was deleted") as info:
        async with open_user(storage, "msteams", "29:ada") as reminder:
            reminder["reminded"] = True
            await storage.delete([KEY])  # the user asked to be forgotten meanwhile
    assert info.value.scopes == ["user"] and await storage.stored(KEY) is None


async def test_open_state_creates_when_both_create(storage: CountingStorage) -> None:
    async with open_user(storage, "msteams", "29:ada") as first:
        async with open_user(storage, "msteams", "29:ada") as second:
            second["b"] = 2
        first["a"] = 1
    assert await storage.stored(KEY) == {"a": 1, "b": 2}


class Contended(CountingStorage):
    """Another writer bumps `other` in the user's document just before each write."""

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        current = (await MemoryStorage.read(self, [KEY]))[KEY].value
        current["other"] = current.get("other", 0) + 1
        await MemoryStorage.write(self, {KEY: StoreItem(current, "*")})
        return await super().write(changes, ttl=ttl, unchanged=unchanged)


async def test_edit_state_retries_are_bounded() -> None:
    storage = Contended()
    await MemoryStorage.write(storage, {KEY: StoreItem({}, None)})
    runs = 0

    def edit(user: UserState) -> None:
        nonlocal runs
        runs += 1
        user["mine"] = True

    with pytest.raises(StateConflictError, match="gave up after 3") as info:
        await edit_state(storage, UserState, ADA, edit, retries=2)
    assert info.value.scopes == ["user"] and isinstance(info.value.__cause__, StateConflictError)
    assert runs == 3 and len(storage.writes) == 3
    assert await storage.stored(KEY) == {"other": 3}
    with pytest.raises(ValueError):
        await edit_state(storage, UserState, ADA, edit, retries=-1)


async def test_open_state_retries_are_bounded() -> None:
    storage = Contended()
    await MemoryStorage.write(storage, {KEY: StoreItem({}, None)})
    with pytest.raises(StateConflictError, match="gave up after 2"):
        async with open_state(storage, UserState, ADA, retries=1) as user:
            user["mine"] = True
    assert len(storage.writes) == 2 and len(storage.reads) == 2
    assert await storage.stored(KEY) == {"other": 2}


HOSTILE = ["29:ada", "x/conversations/y", "..", ".", "%2F", "a b", "名前", "users", "~"]


async def test_list_users_of_a_channel_with_hostile_ids(storage: CountingStorage) -> None:
    for user in HOSTILE:
        await seed(storage, user_key("msteams", user), {"n": 1})
        await seed(storage, session_key("msteams", "conv", user), {"n": 1})
    await seed(storage, user_key("msteams2", "other-channel"), {})
    await seed(storage, user_key("ms", "prefix-channel"), {})
    await seed(storage, user_key("msteams", "namespaced", namespace="msteams"), {})
    await seed(storage, conversation_key("msteams", "conv"), {})
    await seed(storage, app_key("msteams"), {})
    users = [user async for user in list_users(storage, "msteams")]
    assert sorted(users) == sorted(HOSTILE)


async def test_list_conversations_excludes_sessions(storage: CountingStorage) -> None:
    conversations = ["19:a@thread.v2", "x/users/y", "..", "conv/users"]
    for conversation in conversations:
        await seed(storage, conversation_key("slack", conversation), {})
        await seed(storage, session_key("slack", conversation, "u1"), {})
    await seed(storage, session_key("slack", "only-sessions", "u1"), {})
    await seed(storage, user_key("slack", "u1"), {})
    found = [c async for c in list_conversations(storage, "slack")]
    assert sorted(found) == sorted(conversations)


async def test_listing_respects_the_namespace(storage: CountingStorage) -> None:
    await seed(storage, user_key("c", "in-ns", namespace="bot1"), {})
    await seed(storage, user_key("c", "no-ns"), {})
    assert [u async for u in list_users(storage, "c", namespace="bot1")] == ["in-ns"]
    assert [u async for u in list_users(storage, "c")] == ["no-ns"]
    assert [u async for u in list_users(storage, "nobody")] == []


async def test_two_concurrent_open_state_increments_never_store_one(
    storage: CountingStorage,
) -> None:
    """The lost update of the issue: both read visits=5 and would both store 6."""
    await seed(storage, KEY, {"visits": 5})
    with pytest.raises(StateConflictError) as info:
        async with open_user(storage, "msteams", "29:ada") as first:
            async with open_user(storage, "msteams", "29:ada") as second:
                second["visits"] = second["visits"] + 1
            first["visits"] = first["visits"] + 1
    assert "/visits" in info.value.paths
    assert await storage.stored(KEY) == {"visits": 6}  # one increment stored, one refused


@pytest.fixture
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    storage = open_storage(STORES[request.param](str(tmp_path)))
    try:
        yield storage
    finally:
        await storage.close()


@pytest.mark.parametrize("store", ["memory", "file", "redis"], indirect=True)
async def test_twenty_concurrent_edits_all_land(store: Storage) -> None:
    """Background edits re-run like turns: contention never fails one (20 at once, each
    yielding between its read and its write, so they really overlap)."""

    async def add_one(user: UserState) -> None:
        count = user.get("count", 0)
        await asyncio.sleep(0)
        user["count"] = count + 1

    await asyncio.gather(*(edit_state(store, UserState, ADA, add_one) for _ in range(20)))
    assert (await read_state(store, UserState, ADA))["count"] == 20
