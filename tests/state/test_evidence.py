"""Exactly once at no extra document: a turn with an activity id keeps its delivery evidence
inside a bucket document it writes anyway (the reserved member `$delivered`), in the same
conditional write, on every backend. Writes and reads are observed on the real backends."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_state import (
    Activity,
    ActivityConflictError,
    AgentApplication,
    ScopeError,
    StateValueError,
    TurnContext,
    TurnState,
    UndeclaredScopeError,
    conversation_key,
    open_storage,
    parse_key,
    session_key,
    user_key,
)
from agent_state._delivery import EVIDENCE_LIMIT, digest
from agent_state._document import Document
from agent_state._seal import unseal
from agent_state.backends import FormatError, MemoryStorage, Storage, StoreItem
from tests.stores import STORES

USER = user_key("ch", "ada")
CONVERSATION = conversation_key("ch", "c1")
SESSION = session_key("ch", "c1", "ada", agent="bot")


class Recorder:
    """The read and write batches a real storage is asked for (its public calls, recorded by
    wrapping the instance's own methods)."""

    def __init__(self, storage: Storage) -> None:
        self.reads: list[list[str]] = []
        self.writes: list[tuple[list[str], list[str]]] = []
        """Each write batch: the keys written, and the keys sent as read checks."""
        read, write = storage.read, storage.write

        async def recorded_read(keys: Iterable[str]) -> dict[str, StoreItem]:
            keys = list(keys)
            self.reads.append(keys)
            return await read(keys)

        async def recorded_write(
            changes: Mapping[str, StoreItem],
            *,
            ttl: float | None = None,
            unchanged: Mapping[str, str | None] | None = None,
        ) -> dict[str, str]:
            self.writes.append((sorted(changes), sorted(unchanged or {})))
            return await write(changes, ttl=ttl, unchanged=unchanged)

        storage.read = recorded_read  # type: ignore[method-assign]
        storage.write = recorded_write  # type: ignore[method-assign]

    def clear(self) -> None:
        self.reads.clear()
        self.writes.clear()


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    opened = open_storage(STORES[request.param](str(tmp_path)))
    try:
        yield opened
    finally:
        await opened.close()


def message(text: str, activity_id: str | None = "a-1", user: str = "ada") -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "message", "channelId": "ch", "text": text,
                            "from": {"id": user}, "conversation": {"id": "c1"}}  # fmt: skip
    if activity_id is not None:
        wire["id"] = activity_id
    return wire


def shop(storage: Storage, **options: Any) -> tuple[AgentApplication, list[str]]:
    """A bot whose `count` changes the conversation bucket, `note` the session, `peek` nothing,
    and whose declared routes use only the scopes they name."""
    app = AgentApplication(storage, app_name="bot", **options)
    ran: list[str] = []

    @app.message("count")
    async def count(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["conversation:n"] = state.get("conversation.n", 0) + 1
        await ctx.send(f"n {state['conversation:n']}")

    @app.message("note")
    async def note(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["noted"] = state.get("noted", 0) + 1
        await ctx.send(f"noted {state['noted']}")

    @app.message("peek")
    async def peek(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        await ctx.send(f"n is {state.get('conversation.n', 0)}")

    @app.message("declared", scopes=("user", "conversation"))
    async def declared(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["user:seen"] = state.get("user.seen", 0) + 1
        await ctx.send(f"seen {state['user:seen']}")

    @app.message("nothing stored", scopes=())
    async def unstored(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["temp:x"] = 1
        await ctx.send("ok")

    @app.message("overreach", scopes=("conversation",))
    async def overreach(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["conversation:n"] = 5
        state["user:seen"] = 1

    return app, ran


async def stored(storage: Storage, key: str) -> dict[str, Any]:
    item = (await storage.read([key])).get(key)
    return item.value if item is not None else {}


async def test_a_turn_with_an_id_writes_only_the_bucket_it_changed(storage: Storage) -> None:
    app, ran = shop(storage)
    recorder = Recorder(storage)
    assert [r.text for r in await app.process(message("count"))] == ["n 1"]
    assert recorder.writes == [([CONVERSATION], [])]  # one document, no read checks
    recorder.clear()
    assert [r.text for r in await app.process(message("count"))] == ["n 1"]  # redelivered
    assert recorder.writes == [] and ran == ["count"]
    keys = [key async for key in storage.list("")]
    assert keys == [CONVERSATION]  # no delivery record beside it
    assert all(parse_key(key).kind == "state" for key in keys)


async def test_a_turn_with_an_id_that_changes_nothing_writes_one_document(
    storage: Storage,
) -> None:
    app, ran = shop(storage)
    recorder = Recorder(storage)
    assert [r.text for r in await app.process(message("peek"))] == ["n is 0"]
    assert recorder.writes == [([USER], [])]  # the home: the user's bucket
    recorder.clear()
    again = await app.process(message("peek"))
    assert [r.text for r in again] == ["n is 0"] and ran == ["peek"] and recorder.writes == []
    home = await stored(storage, USER)
    assert list(home) == ["$delivered"] and list(home["$delivered"]) == ["ch/c/c1/a-1"]


async def test_the_evidence_goes_in_the_first_written_document_in_a_fixed_order(
    storage: Storage,
) -> None:
    app, _ = shop(storage)

    @app.message("both")
    async def both(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:n"] = 1
        state["user:seen"] = 1

    recorder = Recorder(storage)
    await app.process(message("both", "b-1"))
    assert recorder.writes == [([CONVERSATION, USER], [])]
    assert "ch/c/c1/b-1" in (await stored(storage, USER))["$delivered"]  # user before conversation
    assert "$delivered" not in await stored(storage, CONVERSATION)


async def test_the_evidence_is_hidden_from_the_users_data(storage: Storage) -> None:
    app, _ = shop(storage)
    await app.process(message("count"))
    seen: list[Any] = []

    @app.message("look")
    async def look(ctx: TurnContext, state: TurnState) -> None:
        seen.extend(
            [dict(state.conversation.data), state.to_dict(), "$delivered" in state.conversation]
        )

    await app.process(message("look", None))
    assert seen == [{"n": 1}, {"conversation:n": 1}, False]
    assert set(await stored(storage, CONVERSATION)) == {"n", "$delivered"}  # an export shows it


async def test_a_value_using_the_reserved_member_is_refused_before_anything_is_written(
    storage: Storage,
) -> None:
    app, _ = shop(storage)

    @app.message("reserved")
    async def reserved(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:$delivered"] = {}

    with pytest.raises(StateValueError, match=r"\$delivered"):
        await app.process(message("reserved", None))
    assert [key async for key in storage.list("")] == []


async def test_redelivery_and_conflict_keep_their_meaning(storage: Storage) -> None:
    app, ran = shop(storage)
    first = await app.process(message("note"))
    assert [r.text for r in first] == [r.text for r in await app.process(message("note"))]
    with pytest.raises(ActivityConflictError):
        await app.process(message("count"))  # the same id, other content
    assert ran == ["note"] and (await stored(storage, SESSION))["noted"] == 1


async def test_evidence_is_bounded_by_count(storage: Storage) -> None:
    app, ran = shop(storage)
    for number in range(EVIDENCE_LIMIT + 3):
        await app.process(message("note", f"n-{number}"))
    kept = (await stored(storage, SESSION))["$delivered"]
    assert sorted(kept) == sorted(f"ch/c/c1/n-{n}" for n in range(3, EVIDENCE_LIMIT + 3))
    await app.process(message("note", "n-0"))  # dropped: a new delivery
    await app.process(message("note", f"n-{EVIDENCE_LIMIT + 2}"))  # kept: redelivered
    assert len(ran) == EVIDENCE_LIMIT + 4


async def test_evidence_is_bounded_by_retention(storage: Storage) -> None:
    app, ran = shop(storage, dedup_retention=0.5)
    await app.process(message("note", "old"))
    written = (await stored(storage, SESSION))["$delivered"]["ch/c/c1/old"]["at"]
    while time.time() <= written + 0.5:
        await asyncio.sleep(0.05)  # waiting for the clock: the retention window
    await app.process(message("note", "new"))
    assert list((await stored(storage, SESSION))["$delivered"]) == ["ch/c/c1/new"]
    await app.process(message("note", "old"))  # past the window: applied again
    assert ran == ["note", "note", "note"]


async def test_a_declared_route_reads_only_its_scopes(storage: Storage) -> None:
    app, ran = shop(storage)
    recorder = Recorder(storage)
    first = await app.process(message("declared"))
    assert recorder.reads == [[USER, CONVERSATION]]
    assert recorder.writes == [([USER], [])]
    recorder.clear()
    assert [r.text for r in await app.process(message("declared"))] == [r.text for r in first]
    assert recorder.reads == [[USER, CONVERSATION]] and recorder.writes == [] and len(ran) == 1
    recorder.clear()
    await app.process(message("nothing stored", "t-1"))  # reads only the evidence's home
    assert recorder.reads == [[USER]] and recorder.writes == [([USER], [])]


async def test_an_undeclared_scope_is_a_typed_error_with_nothing_written(
    storage: Storage,
) -> None:
    app, ran = shop(storage)
    recorder = Recorder(storage)
    with pytest.raises(UndeclaredScopeError) as info:
        await app.process(message("overreach"))
    assert info.value.scope == "user" and info.value.declared == ("conversation",)
    assert "overreach" in str(info.value) and "scopes=" in str(info.value)
    assert recorder.reads == [[CONVERSATION]] and recorder.writes == [] and ran == ["overreach"]
    assert [key async for key in storage.list("")] == []


async def test_evidence_in_the_shared_conversation_names_no_one(storage: Storage) -> None:
    app, ran = shop(storage)
    first = await app.process(message("count", "mine"))
    await app.process(message("count", "theirs", user="bob"))
    entries = (await stored(storage, CONVERSATION))["$delivered"]
    assert set(entries) == {"ch/c/c1/mine", "ch/c/c1/theirs"}
    raw = orjson.dumps(entries)
    assert b"ada" not in raw and b"n 1" not in raw  # no sender, the reply sealed
    again = await app.process(message("count", "mine"))  # a redelivery opens it
    assert [r.text for r in again] == [r.text for r in first] == ["n 1"] and len(ran) == 2


async def test_evidence_whose_replies_do_not_unseal_is_a_format_error(storage: Storage) -> None:
    app, ran = shop(storage)
    await app.process(message("count", "mine"))
    planted = await stored(storage, CONVERSATION)
    planted["$delivered"]["ch/c/c1/mine"]["sealed"] = base64.b64encode(b"x" * 40).decode()
    await storage.write({CONVERSATION: StoreItem(planted, "*")})
    with pytest.raises(FormatError, match="unseal"):
        await app.process(message("count", "mine"))
    assert len(ran) == 1 and await stored(storage, CONVERSATION) == planted


def test_declared_scopes_are_checked_when_the_route_is_registered() -> None:
    app = AgentApplication(MemoryStorage())
    with pytest.raises(ScopeError, match="unknown"):
        app.message("x", scopes=("users",))
    with pytest.raises(TypeError, match="str"):
        app.activity("event", scopes="user")


async def test_a_plain_reply_is_kept_as_what_a_redelivery_cannot_rebuild(storage: Storage) -> None:
    app, _ = shop(storage)
    first = await app.process(message("note"))
    entry = (await stored(storage, SESSION))["$delivered"]["ch/c/c1/a-1"]
    key = digest(Activity.of(message("note"))).key
    assert unseal(key, entry["sealed"]) == ["noted 1"]  # the rest comes from the activity
    again = await app.process(message("note"))
    assert [r.model_dump() for r in again] == [r.model_dump() for r in first]


async def test_a_reply_of_its_own_shape_comes_back_whole_on_a_redelivery(
    storage: Storage,
) -> None:
    app, ran = shop(storage)

    @app.message("shaped")
    async def shaped(ctx: TurnContext, state: TurnState) -> None:
        ran.append(ctx.text)
        state["noted"] = 1
        await ctx.send({"type": "event", "recipient": {"id": "bob"}, "name": "x", "value": [1]})
        await ctx.send({"text": "no reply-to", "replyToId": None, "channelData": {"a": 1}})
        reply = ctx.activity.reply("renamed")
        reply.recipient = None
        ctx.replies.append(reply)

    first = await app.process(message("shaped"))
    again = await app.process(message("shaped"))
    assert ran == ["shaped"]
    assert [r.model_dump() for r in again] == [r.model_dump() for r in first]
    assert first[0].recipient is not None and first[0].recipient.id == "bob"
    assert first[2].recipient is None


async def test_the_change_a_turn_saves_is_serialized_once(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, _ = shop(storage)
    await app.process(message("note"))
    dumped: list[str | None] = []
    dump = Document.dump

    def counted(document: Document, value: dict[str, Any]) -> bytes:
        dumped.append(document.key)
        return dump(document, value)

    monkeypatch.setattr(Document, "dump", counted)
    assert [r.text for r in await app.process(message("note", "a-2"))] == ["noted 2"]
    # the baseline (stored bytes that carry evidence are not the value's) and the change once:
    # the check placing the evidence and the save's write share the change's bytes
    assert dumped.count(SESSION) == 2
    assert (await stored(storage, SESSION))["noted"] == 2
