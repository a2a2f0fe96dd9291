"""forget_user and export_user on every backend: everything about the user goes, everyone
else's stays; a forget racing the user's turns leaves nothing they said before it; a forget
killed half way is finished by the next reader."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from agent_state import (
    AgentApplication,
    TurnContext,
    TurnState,
    UnknownUserError,
    conversation_key,
    export_user,
    forget_user,
    open_storage,
    session_key,
    user_key,
)
from agent_state.backends import Outcomes, PreparedWrite, Storage, _commit
from tests.lifecycle.support import AGENT, CHANNEL, activity, application, leftovers
from tests.stores import SHARED, STORES


@pytest.fixture(params=list(STORES))
def url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    return STORES[request.param](str(tmp_path))


@pytest.fixture
async def storage(url: str) -> AsyncIterator[Storage]:
    async with open_storage(url) as opened:
        yield opened


async def seed(storage: Storage) -> list[str]:
    """ada.l talks in c1 (shared with bob) and c2; bob in c1 and c3. Her texts. Ids and texts
    have letters no hex digest or uuid holds, so a raw scan finds them only where they are."""
    app = application(storage)
    texts = ["ada-secret-1", "ada-secret-2", "ada-secret-3"]
    await app.process(activity("ada.l", "c1", texts[0]))
    await app.process(activity("bob", "c1", "bob-one"))
    await app.process(activity("ada.l", "c2", texts[1]))
    await app.process(activity("ada.l", "c2", texts[2]))
    await app.process(activity("bob", "c3", "bob-two"))
    return texts


def users_data(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored bucket without the delivery evidence it carries (bob's turns' own)."""
    return {name: value for name, value in stored.items() if name != "$delivered"}


async def test_forget_removes_all_of_a_user_and_keeps_the_others(storage: Storage) -> None:
    texts = await seed(storage)
    exported = [orjson.loads(line) async for line in export_user(storage, CHANNEL, "ada.l")]
    keys = {line["key"] for line in exported}
    assert user_key(CHANNEL, "ada.l") in keys
    assert {session_key(CHANNEL, c, "ada.l", agent=AGENT) for c in ("c1", "c2")} <= keys
    assert any(texts[2].encode() in orjson.dumps(line["value"]) for line in exported)
    assert all({"key", "version", "ttl", "value"} <= set(line) for line in exported)
    assert conversation_key(CHANNEL, "c1") not in keys  # shared with bob: kept

    report = await forget_user(storage, CHANNEL, "ada.l")
    assert report.documents == len(keys)
    assert await leftovers(storage, "ada.l", texts) == []
    bobs = session_key(CHANNEL, "c1", "bob", agent=AGENT)
    kept = await storage.read([user_key(CHANNEL, "bob"), bobs, conversation_key(CHANNEL, "c1")])
    assert users_data(kept[user_key(CHANNEL, "bob")].value) == {"turns": 2}
    assert users_data(kept[conversation_key(CHANNEL, "c1")].value) == {"turns": 2}
    assert session_key(CHANNEL, "c1", "bob", agent=AGENT) in kept
    assert len([line async for line in export_user(storage, CHANNEL, "bob")]) > 0
    with pytest.raises(UnknownUserError):
        await forget_user(storage, CHANNEL, "ada.l")
    with pytest.raises(UnknownUserError):
        [line async for line in export_user(storage, CHANNEL, "ada.l")]


async def test_a_forget_racing_the_users_turns_leaves_nothing_said_before_it(
    storage: Storage,
) -> None:
    app = application(storage)
    before = [f"old-{i}" for i in range(4)]
    for i, text in enumerate(before):
        await app.process(activity("ada.l", f"c{i % 2}", text))

    async def turns() -> None:
        for i in range(6):
            await app.process(activity("ada.l", f"c{i % 3}", f"during-{i}"))

    await asyncio.gather(turns(), forget_user(storage, CHANNEL, "ada.l"))
    # what the racing turns saved may stay (they ran on an emptied state), nothing said before
    assert await leftovers(storage, "\x00no user", before) == []
    # whatever the racing turns saved is indexed: a second forget leaves nothing at all
    try:
        await forget_user(storage, CHANNEL, "ada.l")
    except UnknownUserError:
        pass
    assert await leftovers(storage, "ada.l", [*before, "during-"]) == []


async def test_a_user_who_changed_only_shared_buckets_leaves_nothing_naming_them(
    storage: Storage,
) -> None:
    """A turn that changes only the conversation or the app bucket (with or without a
    conversation) leaves its delivery evidence there: it names no one and seals the replies
    (which echo the user), so nothing about the user is stored for a forget to find, and a
    redelivery still gets the first replies."""
    app, ran = AgentApplication(storage, app_name=AGENT), []

    @app.message()
    async def shared(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        scope = "app" if ctx.text.startswith("app") else "conversation"
        state[f"{scope}:n"] = state.get(f"{scope}.n", 0) + 1
        await ctx.send(f"you said {ctx.text}")

    without_conversation = activity("ada.l", "c1", "app-ada-nochat")
    del without_conversation["conversation"]
    sent = [
        activity("ada.l", "c1", "conv-ada-secret"),
        activity("ada.l", "c1", "app-ada-secret"),
        without_conversation,
    ]
    first = [[reply.text for reply in await app.process(wire)] for wire in sent]
    await app.process(activity("bob", "c1", "bob-one"))
    assert await leftovers(storage, "ada.l", ["ada-secret", "ada-nochat"]) == []
    with pytest.raises(UnknownUserError):
        await forget_user(storage, CHANNEL, "ada.l")
    again = [[reply.text for reply in await app.process(wire)] for wire in sent]
    assert again == first == [[f"you said {wire['text']}"] for wire in sent] and len(ran) == 4


async def test_a_session_started_after_the_forgets_last_look_is_still_found(
    storage: Storage,
) -> None:
    """A turn of the user starts a session (and writes its index entry) once the forget's
    last pass looked at the sessions and found none, before it deletes the entries: the
    entries it deletes are those it read before looking, so the new entry refuses the delete
    and another pass finds the session; nothing of the user is left unindexed."""
    app = application(storage)
    before = [f"old-{i}" for i in range(2)]
    for i, text in enumerate(before):
        await app.process(activity("ada.l", f"c{i}", text))
    entries = {user_key(CHANNEL, "ada.l") + f"/sessions/c{i}" for i in range(2)}
    read, deleted, raced = storage.read, False, False

    async def turn_before_the_entries_are_read(keys: Any) -> Any:
        nonlocal raced
        keys = list(keys)
        if deleted and not raced and set(keys) == entries:
            raced = True  # the forget deleted the sessions: ada starts c0 again
            await app.process(activity("ada.l", "c0", "during"))
        return await read(keys)

    delete = storage.delete

    async def note_deletes(keys: Any, **conditions: Any) -> None:
        nonlocal deleted
        deleted = True
        await delete(keys, **conditions)

    storage.read = turn_before_the_entries_are_read  # type: ignore[method-assign]
    storage.delete = note_deletes  # type: ignore[method-assign]
    try:
        await forget_user(storage, CHANNEL, "ada.l")
    finally:
        storage.__dict__.pop("read", None)
        storage.__dict__.pop("delete", None)
    assert raced
    try:
        await forget_user(storage, CHANNEL, "ada.l")
    except UnknownUserError:
        pass
    assert await leftovers(storage, "ada.l", [*before, "during"]) == []


@pytest.mark.parametrize("name", SHARED)
async def test_a_forget_killed_half_way_is_finished_by_the_next_reader(
    name: str, tmp_path: object
) -> None:
    url = STORES[name](str(tmp_path))
    async with open_storage(url) as storage:
        texts = await seed(storage)
    worker = subprocess.run(
        [sys.executable, "-m", "tests.lifecycle.forget_worker", url, "ada.l", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    async with open_storage(url) as storage:
        assert await leftovers(storage, "ada.l", texts) != []  # killed half way: some is left
        with pytest.raises(UnknownUserError):  # the reader finishes the forget
            [line async for line in export_user(storage, CHANNEL, "ada.l")]
        assert await leftovers(storage, "ada.l", texts) == []
        assert user_key(CHANNEL, "bob") in await storage.read([user_key(CHANNEL, "bob")])


INTENTS = [name for name in STORES if name in ("file", "redis-cluster", "blob", "cosmos")]
"""The stores that commit a batch across their atomic units through intents (`_commit`)."""


@pytest.mark.parametrize("name", INTENTS)
async def test_a_reader_settling_a_dead_commit_after_the_forget_puts_nothing_back(
    name: str, tmp_path: object
) -> None:
    """A writer died after replacing the user's session by its intent (which holds the
    session as it was): a reader that met the intent before the forget, and puts the session
    back only after the forget returned, must not bring it back."""
    async with open_storage(STORES[name](str(tmp_path))) as storage:
        texts = await seed(storage)
        bucket = session_key(CHANNEL, "c2", "ada.l", agent=AGENT)
        current = (await storage.read([bucket]))[bucket]
        change = PreparedWrite(bucket, b"{}", {}, current.etag, storage.group_of(bucket), None)
        late = time.time() - 1  # the reader aborts it at once
        intent = _commit._intent(storage, change, current, uuid.uuid4().hex, False, late)
        await storage._write([intent], {})
        write = storage._write

        async def put_back_after_the_forget(
            writes: list[PreparedWrite], outcomes: Outcomes
        ) -> None:
            if any(w.key == bucket and _commit.INTENT.encode() not in w.data for w in writes):
                del storage._write  # the reader's put-back: the forget runs to its end first
                assert (await forget_user(storage, CHANNEL, "ada.l")).documents > 0
            await write(writes, outcomes)

        storage._write = put_back_after_the_forget  # type: ignore[method-assign]
        try:
            assert await storage.read([bucket]) == {}
        finally:
            storage.__dict__.pop("_write", None)
        assert await leftovers(storage, "ada.l", texts) == []
