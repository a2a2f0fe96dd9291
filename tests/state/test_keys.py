"""The key scheme: one-to-one escaping and parsing (DESIGN.md "Storage keys")."""

from __future__ import annotations

import itertools
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_state import (
    AgentApplication,
    ParsedKey,
    TurnContext,
    TurnIds,
    TurnState,
    accept_run,
    app_key,
    conversation_key,
    escape_segment,
    literal,
    open_run,
    parse_key,
    session_key,
    thread_owner_key,
    thread_sent_key,
    unescape_segment,
    user_key,
    write_group,
)
from agent_state.backends import InvalidKeyError, MemoryStorage, StoreItem
from agent_state.backends._keys import check_key

ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)


@given(ids)
def test_segment_is_safe_and_reversible(ident: str) -> None:
    segment = escape_segment(ident)
    assert "/" not in segment and segment not in ("", ".", "..") and "\x00" not in segment
    assert unescape_segment(segment) == ident


@given(ids, ids)
def test_distinct_ids_never_share_a_segment(a: str, b: str) -> None:
    assert (escape_segment(a) == escape_segment(b)) == (a == b)


@given(ids, ids, ids)
def test_every_key_parses_back_to_its_ids(channel: str, conversation: str, user: str) -> None:
    assert parse_key(user_key(channel, user)) == ParsedKey("user", channel=channel, user=user)
    assert parse_key(conversation_key(channel, conversation)) == ParsedKey(
        "conversation", channel=channel, conversation=conversation
    )
    assert parse_key(session_key(channel, conversation, user)) == ParsedKey(
        "session", channel=channel, conversation=conversation, user=user
    )
    assert parse_key(session_key(channel, conversation, user, agent=channel)) == ParsedKey(
        "session", channel=channel, conversation=conversation, user=user, app=channel
    )
    assert parse_key(app_key(user)) == ParsedKey("app", app=user)
    agent_session = session_key(channel, conversation, user, agent=conversation)
    for key in (user_key(channel, user), session_key(channel, conversation, user), agent_session):
        check_key(key)  # every built key is a valid storage key


@given(st.tuples(ids, ids, ids), st.tuples(ids, ids, ids))
def test_keys_collide_only_for_the_same_scope_and_ids(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    def all_keys(c: str, v: str, u: str) -> list[str]:
        return [user_key(c, u), conversation_key(c, v), session_key(c, v, u), app_key(u),
                session_key(c, v, u, agent=c)]  # fmt: skip

    for a in all_keys(*first):
        for b in all_keys(*second):
            assert (a == b) == (parse_key(a) == parse_key(b))


def test_readable_ids_stay_readable() -> None:
    assert user_key("msteams", "29:1abc") == "msteams/users/29:1abc"
    assert conversation_key("msteams", "19:x@thread.v2") == "msteams/conversations/19:x@thread.v2"


def test_an_id_cannot_address_another_scope() -> None:
    key = user_key("c", "x/conversations/y")
    assert key == "c/users/x%2Fconversations%2Fy"
    assert parse_key(key).scope == "user"


@pytest.mark.parametrize("ident, segment", [(".", "%2E"), ("..", "%2E%2E"), ("a.b", "a.b")])
def test_dot_segments_are_escaped(ident: str, segment: str) -> None:
    assert escape_segment(ident) == segment


def test_namespace_isolates_keys() -> None:
    key = user_key("c", "u", namespace="bot-a")
    assert key == "bot-a/c/users/u"
    assert parse_key(key, namespace="bot-a").user == "u"
    with pytest.raises(InvalidKeyError):
        parse_key(key, namespace="bot-b")


@pytest.mark.parametrize("bad", ["", None, 5, "\ud800"])
def test_bad_ids_are_refused_naming_what(bad: int | str | None) -> None:
    with pytest.raises(InvalidKeyError, match="user id"):
        user_key("c", bad)  # type: ignore[arg-type]  # the wrong type is the point


@pytest.mark.parametrize(
    "key",
    [
        "c/users",
        "c/users/u/extra",
        "c/people/u",
        "app",
        "c/users/%2f",
        "c/users/%41",
        "c/users/%FF",
        "c/users/a%2Eb",
        "c/conversations/v/members/u",
        "",
    ],
)
def test_foreign_or_non_canonical_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        parse_key(key)


@given(st.text(st.sampled_from("aZ09-_.:@~/%é \x00"), min_size=1, max_size=12))
def test_escaping_is_percent_encoding_outside_the_safe_set(ident: str) -> None:
    """Ids that need no escaping take a fast path; it must agree with the general one."""
    expected = quote(ident, safe="-_.:@~")
    assert escape_segment(ident) == (expected if expected.strip(".") else "%2E" * len(ident))


@given(st.text(st.sampled_from("a./\x00é"), max_size=8))
def test_check_key_refuses_exactly_empty_dot_and_nul_segments(key: str) -> None:
    segments = key.split("/")
    if not key or "\x00" in key or any(s in ("", ".", "..") for s in segments):
        with pytest.raises(InvalidKeyError):
            check_key(key)
    else:
        assert check_key(key) == key


def test_check_key_remembers_only_valid_keys() -> None:
    for _ in range(2):  # a refusal is never remembered: the second call refuses again
        with pytest.raises(InvalidKeyError):
            check_key("a//b")
    assert check_key("a/b") == "a/b" and check_key("a/b") == "a/b"

    class Key(str):
        pass

    assert check_key(Key("a/b")) == "a/b"  # a str subclass is checked like a str
    with pytest.raises(InvalidKeyError):
        check_key(Key("a/../b"))


def write_group_of(parsed: ParsedKey, key: str) -> str:
    """The write group the module docstring's table gives a parsed key."""
    if parsed.conversation is not None:
        return conversation_key(
            parsed.channel or "", parsed.conversation, namespace=parsed.namespace
        )
    if parsed.scope == "user":
        return user_key(parsed.channel or "", parsed.user or "", namespace=parsed.namespace)
    return key


def test_a_prefix_group_is_the_group_of_every_key_under_the_prefix() -> None:
    """Every key of up to six segments drawn from the rule's words, and every prefix of it:
    where `prefix_group` names a group, it is the key's `write_group`; the prefixes forget
    and retention list (a user's records, a session's) do name one."""
    words = ("ch", "users", "conversations", "")
    named = 0
    for length in range(1, 7):
        for parts in itertools.product(words, repeat=length):
            key = "/".join(parts)
            for end in range(len(key) + 1):
                group = write_group.prefix_group(key[:end])
                if group is not None:
                    named += 1
                    assert write_group(key) == group, (key, end)
                    assert key[:end].startswith(group + "/")
    assert named > 1000
    user, session = user_key("ch", "u", namespace="ns"), session_key("ch", "c", "u")
    assert write_group.prefix_group(user + "/") == user == write_group(user + "/sessions/c")
    assert write_group.prefix_group(session + "/") == conversation_key("ch", "c")
    assert write_group.prefix_group(user) is None  # `ns/ch/users/u2` is another user's key
    assert write_group.prefix_group("") is None


async def test_parse_key_reads_every_key_the_library_writes() -> None:
    """A bot turn with an activity id and history, a run, an AG-UI-style thread: every key
    in the store parses, to the kind of document it is, and sits in the table's write group."""
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="bot", namespace="ns")

    @app.activity("message")
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["user:n"] = state.get("user.n", 0) + 1
        if state.ids.conversation_id is not None:
            state["conversation:n"] = 1
            await state.history.append(*({"id": f"m/{i}", "role": "user"} for i in range(40)))

    for channel_only in (False, True):  # evidence in a bucket: no key of its own
        await app.process(
            {"type": "message", "id": "a/1", "channelId": "ch", "from": {"id": "u"}}
            | ({} if channel_only else {"conversation": {"id": "c"}})
        )
    ids = TurnIds(channel_id="ch", user_id="u", conversation_id="c", app_name="bot", namespace="ns")
    run = await accept_run(storage, ids, "r/1", {"q": 1}, history=literal([]))
    async with open_run(storage, run):
        pass
    session = session_key("ch", "c", "u", agent="bot", namespace="ns")
    conversation = conversation_key("ch", "c", namespace="ns")
    await storage.write({thread_owner_key(conversation): StoreItem({"format": 1, "user": "u"}),
                         thread_owner_key(conversation, "bot"): StoreItem({"format": 1}),
                         thread_sent_key(session): StoreItem({"format": 1})})  # fmt: skip
    kinds = {}
    async for key in storage.list(""):
        parsed = parse_key(key, namespace="ns")
        kinds[key] = (parsed.scope, parsed.kind, parsed.record)
        assert write_group(key) == write_group_of(parsed, key)
    app_doc = app_key("bot", namespace="ns")  # the one scope this bot did not write
    assert write_group(app_doc) == write_group_of(parse_key(app_doc, namespace="ns"), app_doc)
    assert write_group(app_doc) == app_doc
    assert kinds == {
        user_key("ch", "u", namespace="ns"): ("user", "state", None),
        conversation: ("conversation", "state", None),
        f"{session}/history": ("session", "history", None),
        f"{session}/history/pages/0": ("session", "history_page", "0"),
        f"{session}/runs/r%2F1": ("session", "run", "r/1"),
        thread_owner_key(conversation): ("conversation", "agui_owner", None),
        f"{conversation}/agui-owner/bot": ("conversation", "agui_owner", "bot"),
        thread_sent_key(session): ("session", "agui_sent", None),
        "ns/ch/users/u/sessions/c": ("user", "user_session", "c"),
        **{f"{session}/history/ids/m%2F{i}": ("session", "history_index", f"m/{i}")
           for i in range(40)},
    }  # fmt: skip


@pytest.mark.parametrize(
    "key",
    [
        "ch/users/u/history",  # a history belongs to a session
        "ch/conversations/c/users/u/activities/a",
        "ch/conversations/c/users/u/history/pages/01",  # not a canonical page number
        "ch/conversations/c/users/u/runs",
        "ch/conversations/c/agui/x",
        "ch/activities",
        "ch/conversations/c/activities/a",  # delivery evidence has no key of its own
        "ch/users/u/activities/a",
        "ch/activities/a",
    ],
)
def test_parse_key_refuses_what_no_builder_makes(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        parse_key(key)
