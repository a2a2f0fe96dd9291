"""The key scheme: one-to-one escaping and parsing (DESIGN.md "Storage keys")."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_state import (
    ParsedKey,
    app_key,
    conversation_key,
    escape_segment,
    parse_key,
    session_key,
    unescape_segment,
    user_key,
)
from agent_state.backends import InvalidKeyError
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
    assert parse_key(app_key(user)) == ParsedKey("app", app=user)
    for key in (user_key(channel, user), session_key(channel, conversation, user)):
        check_key(key)  # every built key is a valid storage key


@given(st.tuples(ids, ids, ids), st.tuples(ids, ids, ids))
def test_keys_collide_only_for_the_same_scope_and_ids(
    first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    def all_keys(c: str, v: str, u: str) -> list[str]:
        return [user_key(c, u), conversation_key(c, v), session_key(c, v, u), app_key(u)]

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
