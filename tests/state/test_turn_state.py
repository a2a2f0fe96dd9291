"""TurnState: scopes, prefix and path access, one read per load, at most one write per save."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from agent_state import (
    AgentState,
    AppState,
    ConversationState,
    MissingIdError,
    ScopeError,
    Scopes,
    SessionState,
    StateConflictError,
    StatePathError,
    StateValueError,
    TempState,
    TurnIds,
    TurnState,
    UserState,
    app_key,
    conversation_key,
    escape_segment,
    read_state,
    session_key,
    user_key,
)
from agent_state._lifecycle import MERGE_RETRIES, read_turn, save_merging
from agent_state._plan import TURN_STATE_NAMES
from agent_state._scopes import BUILTIN_SCOPES
from agent_state.backends import MemoryStorage, StoreItem
from tests.state.conftest import CountingStorage

IDS = TurnIds(
    channel_id="msteams", user_id="29:ada", conversation_id="19:c@thread.v2", app_name="bot"
)
USER = user_key("msteams", "29:ada")
CONVERSATION = conversation_key("msteams", "19:c@thread.v2")
SESSION = session_key("msteams", "19:c@thread.v2", "29:ada", agent="bot")
INDEX = f"{USER}/sessions/19:c@thread.v2"
"""The user's index entry of the session, written by the save that creates the session."""
APP = app_key("bot")


class TeamState(AgentState):
    """A custom scope: per channel and app, shared by every user."""

    scope = "team"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        channel, app = ids.require(cls.scope, "channel_id", "app_name")
        return f"{escape_segment(channel)}/teams/{escape_segment(app)}"


async def turn(
    storage: CountingStorage, ids: TurnIds = IDS, custom: Sequence[type[AgentState]] = ()
) -> TurnState:
    return await read_turn(storage, ids, Scopes(custom))


async def save(storage: CountingStorage, state: TurnState, *, retries: int = MERGE_RETRIES) -> None:
    await save_merging(storage, state.stored_documents(), retries=retries)


def test_builtin_keys_follow_the_design() -> None:
    assert [cls.key_for(IDS) for cls in BUILTIN_SCOPES if cls.persisted] == [
        "msteams/users/29:ada",
        "msteams/conversations/19:c@thread.v2",
        "msteams/conversations/19:c@thread.v2/users/29:ada/agents/bot",
        "app/bot",
    ]
    namespaced = TurnIds(channel_id="c", user_id="u", namespace="bot1")
    assert UserState.key_for(namespaced) == "bot1/c/users/u"


def test_hostile_ids_stay_inside_their_key() -> None:
    ids = TurnIds(channel_id="c", user_id="x/conversations/y", conversation_id="..")
    assert UserState.key_for(ids) == "c/users/x%2Fconversations%2Fy"
    assert ConversationState.key_for(ids) == "c/conversations/%2E%2E"


@pytest.mark.parametrize(
    ("cls", "missing"),
    [
        (UserState, ("user_id",)),
        (ConversationState, ("conversation_id",)),
        (SessionState, ("conversation_id", "user_id")),
        (AppState, ("app_name",)),
    ],
)
def test_missing_ids_are_named(cls: type[AgentState], missing: tuple[str, ...]) -> None:
    ids = TurnIds(channel_id="c", user_id="" if cls is UserState else None)
    with pytest.raises(MissingIdError) as info:
        cls.key_for(ids)
    assert info.value.scope == cls.scope and info.value.missing == missing
    assert all(name in str(info.value) for name in missing)
    assert isinstance(info.value, ValueError)


async def test_one_read_for_every_persisted_bucket(storage: CountingStorage) -> None:
    await turn(storage)
    assert len(storage.reads) == 1
    assert sorted(storage.reads[0]) == sorted([USER, CONVERSATION, SESSION, APP])


async def test_unchanged_turn_writes_nothing(storage: CountingStorage) -> None:
    await storage.write({USER: _item({"name": "Ada", "n": 0})})
    storage.writes.clear()
    state = await turn(storage)
    assert state.user["name"] == "Ada" and state.get("user.n") == 0 and "topic" not in state
    state["user:name"] = "Ada"  # same value: no change
    state["temp:scratch"] = [1, 2]
    await save(storage, state)
    assert storage.writes == []


async def test_save_writes_only_changed_buckets_in_one_batch(storage: CountingStorage) -> None:
    state = await turn(storage)
    state["user:name"] = "Ada"
    assert state.get("conversation.count") is None  # read, not changed
    state["topic"] = "weather"
    state["temp:scratch"] = "never stored"
    await save(storage, state)
    assert storage.writes == [sorted([USER, SESSION, INDEX])]
    assert await storage.stored(USER) == {"name": "Ada"}
    assert await storage.stored(SESSION) == {"topic": "weather"}
    assert await storage.stored(CONVERSATION) is None
    assert [key async for key in storage.list("")] == sorted([USER, SESSION, INDEX])


async def test_temp_is_never_read_or_written(storage: CountingStorage) -> None:
    state = await turn(storage)
    state.temp["x"] = {"big": list(range(10))}
    await save(storage, state)
    assert storage.writes == [] and all(None not in keys for keys in storage.reads)
    assert (await turn(storage)).temp.get("x") is None


async def test_state_round_trips_between_turns(storage: CountingStorage) -> None:
    first = await turn(storage)
    first.set("user.profile.name", "Ada")
    first["app:flag"] = False
    first["session:count"] = 0
    await save(storage, first)
    second = await turn(storage)
    assert second.get("user.profile.name") == "Ada"
    assert second["app:flag"] is False and second["count"] == 0
    assert second.user.etag is not None and second.conversation.etag is None


async def test_second_save_in_the_same_turn_uses_the_new_etags(storage: CountingStorage) -> None:
    state = await turn(storage)
    state["user:n"] = 1
    await save(storage, state)
    etag = state.user.etag
    assert etag is not None and not state.user.changed
    state["user:n"] = 2
    await save(storage, state)
    assert state.user.etag != etag and await storage.stored(USER) == {"n": 2}
    await save(storage, state)
    assert len(storage.writes) == 2


async def test_conflict_names_the_scope_and_writes_nothing_of_the_batch(
    storage: CountingStorage,
) -> None:
    a = await turn(storage)
    b = await turn(storage)
    a["conversation:topic"] = "a"
    await save(storage, a)
    b["conversation:topic"] = "b"
    b["user:seen"] = True
    with pytest.raises(StateConflictError) as info:
        await save(storage, b)
    error = info.value
    assert error.scopes == ["conversation"] and error.keys == [CONVERSATION]
    assert "conversation" in str(error)
    assert b.user.changed and b.conversation.changed  # ready for a retry
    assert await storage.stored(USER) is None
    assert await storage.stored(CONVERSATION) == {"topic": "a"}


async def test_create_conflict_when_both_turns_create(storage: CountingStorage) -> None:
    a, b = await turn(storage), await turn(storage)
    a["topic"], b["topic"] = "a", "b"
    await save(storage, a)
    with pytest.raises(StateConflictError) as info:
        await save(storage, b)
    assert info.value.scopes == ["session"]


async def test_non_json_values_fail_before_any_write(storage: CountingStorage) -> None:
    state = await turn(storage)
    state["user:ok"] = 1
    state.conversation.data["bad"] = {1, 2}  # slipped in past the set-time check
    with pytest.raises(StateValueError):
        await save(storage, state)
    assert storage.writes == []


def test_prefix_access() -> None:
    state = TurnState(IDS)
    state["user:name"] = "Ada"
    state["app:flag"] = True
    state["temp:scratch"] = 0
    state["conversation:x"] = ""
    state["session:x"] = False
    state["topic"] = []
    state["session:a:b"] = "colon in key"
    state["user:a.b"] = "dot in key"
    assert state.user.data == {"name": "Ada", "a.b": "dot in key"}
    assert state.app.data == {"flag": True} and state.temp.data == {"scratch": 0}
    assert state.conversation.data == {"x": ""}
    assert state.session.data == {"x": False, "topic": [], "a:b": "colon in key"}
    assert state["topic"] == [] and state["session:topic"] == []
    assert "temp:scratch" in state and "user:missing" not in state
    del state["user:name"]
    with pytest.raises(KeyError):
        state["user:name"]
    with pytest.raises(ScopeError):
        state["usr:name"]


def test_dotted_paths() -> None:
    state = TurnState(IDS)
    state.set("user.profile.name", "Ada")
    state.set("conversation.count", 0)
    state.set("user.profile.langs", ["en"])
    state.set("topic", "weather")
    assert state.user.data == {"profile": {"name": "Ada", "langs": ["en"]}}
    assert state.get("conversation.count", 5) == 0
    assert state.get("conversation.missing", 5) == 5
    assert state.get("user.profile.langs.0") == "en" and state.get("user.profile.langs.3") is None
    assert state.has("conversation.count") and not state.has("conversation.nope")
    assert state.get("topic") == "weather" and state.get("session.topic") == "weather"
    state.set("user.profile.langs.0", "fr")
    assert state["user:profile"]["langs"] == ["fr"]
    state.delete("user.profile.name")
    state.delete("user.profile.never")
    state.delete("user.nothing.here")
    assert state.get("user.profile") == {"langs": ["fr"]}


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get("user.name.first"),
        lambda s: s.set("user.name.first", "x"),
        lambda s: s.has("user.name.first"),
        lambda s: s.delete("user.name.first"),
        lambda s: s.get("user.list.first"),
        lambda s: s.set("user.list.9", 1),
        lambda s: s.set("user.none.x", 1),
        lambda s: s.get("user."),
        lambda s: s.get("user..name"),
        lambda s: s.get(""),
    ],
)
def test_bad_paths_give_a_clear_error(call: Callable[[TurnState], object]) -> None:
    state = TurnState(IDS)
    state.user.data.update(name="Ada", list=[1], none=None)
    with pytest.raises(StatePathError):
        call(state)


def test_a_prefixed_key_is_one_member_named_as_is_in_every_form() -> None:
    """ADK style: `state["user:last.login"]` was found by `[]` and `in` but not by `get`
    (None) or `delete` (a no-op), which read the dot as a path step."""
    state = TurnState(IDS)
    state["user:last.login"] = "monday"
    assert state.get("user:last.login") == "monday" == state["user:last.login"]
    assert "user:last.login" in state and state.has("user:last.login")
    assert state.get("user.last.login") is None, "the path form: member `last`, then `login`"
    assert state.user.data == {"last.login": "monday"}
    state.delete("user:last.login")
    assert "user:last.login" not in state and state.user.data == {}
    state.set("user:last.login", "tuesday")
    del state["user:last.login"]
    assert state.user.data == {}


@pytest.mark.parametrize(
    "key", ["version.2", "topic", "user", "a.b:c", "session:user.x", "app:a:b", "session:", "temp:"]
)
def test_every_key_names_the_same_member_in_every_form(key: str) -> None:
    state = TurnState(IDS)
    state[key] = 1
    assert state.get(key) == 1 == state[key] and key in state and state.has(key)
    assert state.setdefault(key, 2) == 1
    assert dict(state) == {key: 1}
    state.delete(key)
    assert key not in state and state.get(key, "gone") == "gone" and dict(state) == {}
    assert state.setdefault(key, 3) == 3 and state[key] == 3
    del state[key]
    assert not state.has(key)


def test_setdefault_update_to_dict_and_dict_of_a_turn_state() -> None:
    state = TurnState(IDS)
    assert state.setdefault("user:visits", 0) == 0
    state["user:visits"] += 1
    assert state.setdefault("user:visits", 10) == 1
    state.update({"user:last.login": "monday", "topic": "billing"}, mood="ok")
    state.update([("app:flag", True), ("temp:x", [1])])
    state["session:user.x"] = 2  # its plain form would be a path into the user scope
    state["session:a:b"] = 3
    expected = {
        "user:visits": 1,
        "user:last.login": "monday",
        "topic": "billing",
        "mood": "ok",
        "session:user.x": 2,
        "session:a:b": 3,
        "app:flag": True,
        "temp:x": [1],
    }
    assert state.to_dict() == expected and dict(state) == expected
    assert sorted(state) == sorted(expected) == sorted(state.keys())
    assert all(state[key] == value for key, value in expected.items())
    with pytest.raises(StatePathError):
        state.update({"user:ok": 1, "user.bad": 2})  # a path is no key: nothing is set
    assert "user:ok" not in state
    assert dict(TurnState(TurnIds(channel_id="c", user_id="u"))) == {}, "scopes lacking ids"


async def test_prefixed_keys_with_dots_round_trip_through_storage(
    storage: CountingStorage,
) -> None:
    state = await turn(storage)
    state.update({"user:last.login": "monday", "app:a.b": 1})
    await save(storage, state)
    again = await turn(storage)
    assert again.get("user:last.login") == "monday" and again.get("app:a.b") == 1
    assert again.to_dict() == {"user:last.login": "monday", "app:a.b": 1}


def test_path_error_names_where_it_failed() -> None:
    state = TurnState(IDS)
    state["user:name"] = "Ada"
    with pytest.raises(StatePathError, match=r"'user'|'name'.*str"):
        state.set("user.name.first", "x")


def test_set_refuses_non_json() -> None:
    state = TurnState(IDS)
    with pytest.raises(StateValueError):
        state.set("user.when", object())


async def test_missing_ids_skip_scopes_but_the_turn_runs(storage: CountingStorage) -> None:
    ids = TurnIds(channel_id="msteams", user_id="29:ada")  # no conversation, no app
    state = await turn(storage, ids)
    assert storage.reads == [[USER]]
    state["user:seen"] = True
    state["temp:x"] = 1
    for touch in (
        lambda: state.conversation,
        lambda: state.session,
        lambda: state["topic"],
        lambda: state.get("conversation.x"),
        lambda: state.app,
    ):
        with pytest.raises(MissingIdError):
            touch()
    with pytest.raises(MissingIdError, match="conversation_id"):
        _ = state.session
    await save(storage, state)
    assert storage.writes == [[USER]]


async def test_a_turn_with_no_ids_reads_nothing(storage: CountingStorage) -> None:
    state = await turn(storage, TurnIds())
    state["temp:x"] = 1
    await save(storage, state)
    assert storage.reads == [] and storage.writes == []


def test_one_bucket_per_turn_and_key() -> None:
    a, b = TurnState(IDS), TurnState(IDS)
    assert a.user is a.user is a.scope("user") and a.user is not b.user
    a["user:x"] = 1
    assert "user:x" not in b and "x" not in UserState()


async def test_custom_scope_round_trip(storage: CountingStorage) -> None:
    state = await turn(storage, custom=[TeamState])
    assert storage.reads[0][-1] == "msteams/teams/bot"
    assert state.team is state.scope("team")
    state["team:goal"] = "ship"
    state.set("team.members.ada", True)
    await save(storage, state)
    assert storage.writes == [["msteams/teams/bot"]]
    again = await turn(storage, custom=[TeamState])
    assert again["team:goal"] == "ship" and again.get("team.members.ada") is True
    assert "team" in again.scope_names


async def test_custom_scope_missing_ids_are_skipped(storage: CountingStorage) -> None:
    state = await turn(storage, TurnIds(channel_id="c", user_id="u"), custom=[TeamState])
    assert storage.reads == [["c/users/u"]]
    with pytest.raises(MissingIdError, match="app_name"):
        _ = state.team


def test_builtin_scope_can_be_replaced_by_a_subclass() -> None:
    class Users(UserState):
        pass

    state = TurnState(IDS, [Users])
    assert type(state.user) is Users


def _scope(
    name: str, *, base: type[AgentState] = AgentState, persisted: bool = True, key: str = "k/{name}"
) -> type[AgentState]:
    def key_for(cls: type[AgentState], ids: TurnIds) -> str:
        return key.format(name=name)

    namespace = {"scope": name, "persisted": persisted, "key_for": classmethod(key_for)}
    return type(f"S_{name}", (base,), namespace)


@pytest.mark.parametrize(
    "customs",
    [
        lambda: [_scope("team"), _scope("team")],
        lambda: [_scope("user")],
        lambda: [_scope("get")],
        lambda: [_scope("discard")],
        lambda: [_scope("a", key="same"), _scope("b", key="same")],
        lambda: [_scope("a", key=USER)],
        lambda: [type("NoKey", (AgentState,), {"scope": "nokey"})],
        lambda: [type("NoScope", (AgentState,), {})],
        lambda: [dict],
    ],
)
def test_clashing_or_broken_custom_scopes_are_refused(customs: Callable[[], list[type]]) -> None:
    with pytest.raises(ScopeError):
        TurnState(IDS, customs())


def test_unknown_scope_and_attribute() -> None:
    state = TurnState(IDS)
    with pytest.raises(ScopeError, match="known"):
        state.scope("nope")
    with pytest.raises(AttributeError):
        _ = state.nope
    assert isinstance(state.temp, TempState)


def _item(value: dict[str, Any]) -> StoreItem:
    return StoreItem(value, None)


def test_an_application_checks_its_custom_scopes_when_built() -> None:
    from agent_state import AgentApplication
    from agent_state.backends import MemoryStorage

    with pytest.raises(ScopeError):
        AgentApplication(MemoryStorage(), custom_scopes=[dict])  # type: ignore[list-item]


def test_scopes_compute_the_keys_of_the_same_ids_once() -> None:
    calls = []

    class Counted(AgentState):
        scope = "counted"

        @classmethod
        def key_for(cls, ids: TurnIds) -> str:
            calls.append(ids)
            assert ids.channel_id is not None
            return f"{escape_segment(ids.channel_id)}/counted"

    scopes = Scopes([Counted])
    first, second = TurnState(IDS, scopes), TurnState(dataclasses.replace(IDS), scopes)
    assert first.counted.key == second.counted.key == "msteams/counted"
    assert first.counted is not second.counted and len(calls) == 1
    TurnState(TurnIds(channel_id="other"), scopes)
    assert len(calls) == 2


class NamespacedTeamState(TeamState):
    """TeamState with its key under the turn's namespace, as every key must be."""

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        key = super().key_for(ids)
        return key if ids.namespace is None else f"{escape_segment(ids.namespace)}/{key}"


async def test_a_custom_key_outside_the_namespace_is_refused(storage: CountingStorage) -> None:
    """A namespace isolates bots sharing a store, so a custom key must not escape it."""
    ids = dataclasses.replace(IDS, namespace="bot1")
    with pytest.raises(ScopeError, match="outside the namespace 'bot1'"):
        TurnState(ids, [TeamState])
    with pytest.raises(ScopeError, match="outside the namespace"):
        await read_state(storage, TeamState, ids)
    assert storage.reads == []

    state = await turn(storage, ids, [NamespacedTeamState])
    assert state.team.key == "bot1/msteams/teams/bot" and state.user.key == "bot1/" + USER
    assert TurnState(IDS, [TeamState]).team.key == "msteams/teams/bot"  # no namespace: as is


# --- concurrent turns: merge different members, refuse the same path -------------------------


async def test_changes_to_different_members_merge_into_the_newer_version(
    storage: CountingStorage,
) -> None:
    await storage.write({CONVERSATION: _item({"topic": "old", "messages": 1, "poll": {}})})
    a, b = await turn(storage), await turn(storage)
    a["conversation:messages"] = a["conversation:messages"] + 1
    a["user:seen"] = True
    await save(storage, a)
    b["conversation:topic"] = "new"
    b.set("conversation.poll.ada", "yes")
    b["topic"] = "session"
    storage.writes.clear()
    await save(storage, b)
    assert await storage.stored(CONVERSATION) == {
        "topic": "new",
        "messages": 2,
        "poll": {"ada": "yes"},
    }
    assert await storage.stored(SESSION) == {"topic": "session"}
    assert storage.writes == [sorted([CONVERSATION, SESSION, INDEX])] * 2  # atomic: all again
    assert b.conversation.etag == (await storage.read([CONVERSATION]))[CONVERSATION].etag
    await save(storage, b)
    assert len(storage.writes) == 2  # merged and saved: nothing left to write


async def test_the_same_change_by_two_turns_is_a_conflict_not_a_lost_update(
    storage: CountingStorage,
) -> None:
    """Two turns both bump a counter from 1 to 2: merging would count one visit, not two."""
    await storage.write({USER: _item({"visits": 1})})
    a, b = await turn(storage), await turn(storage)
    for state in (a, b):
        state["user:visits"] = state["user:visits"] + 1
    await save(storage, a)
    with pytest.raises(StateConflictError) as info:
        await save(storage, b)
    assert info.value.paths == ["/visits"] and info.value.scopes == ["user"]
    assert await storage.stored(USER) == {"visits": 2}


async def test_a_conflict_names_the_paths_and_writes_nothing(storage: CountingStorage) -> None:
    await storage.write({CONVERSATION: _item({"items": [1]})})
    a, b = await turn(storage), await turn(storage)
    a.get("conversation.items").append("a")
    await save(storage, a)
    b.get("conversation.items").append("b")
    b["user:seen"] = True
    with pytest.raises(StateConflictError) as info:
        await save(storage, b)
    assert "/items/1" in info.value.paths and info.value.keys == [CONVERSATION]
    assert await storage.stored(USER) is None
    assert await storage.stored(CONVERSATION) == {"items": [1, "a"]}


async def test_a_bucket_deleted_meanwhile_is_not_brought_back(storage: CountingStorage) -> None:
    await storage.write({USER: _item({"name": "Ada", "plan": "pro"})})
    state = await turn(storage)
    state["user:last_seen"] = "today"
    await storage.delete([USER])  # e.g. the user asked to be forgotten
    with pytest.raises(StateConflictError, match="deleted") as info:
        await save(storage, state)
    assert info.value.scopes == ["user"] and await storage.stored(USER) is None


async def test_buckets_created_by_two_turns_merge(storage: CountingStorage) -> None:
    a, b = await turn(storage), await turn(storage)
    a["topic"] = "a"
    await save(storage, a)
    b["mood"] = "b"
    await save(storage, b)
    assert await storage.stored(SESSION) == {"topic": "a", "mood": "b"}


async def test_merging_is_bounded_by_retries() -> None:
    class Contended(CountingStorage):
        """Another writer changes the conversation's `other` member before every write."""

        async def write(
            self,
            changes: Mapping[str, StoreItem],
            *,
            ttl: float | None = None,
            unchanged: Mapping[str, str | None] | None = None,
        ) -> dict[str, str]:
            current = (await MemoryStorage.read(self, [CONVERSATION]))[CONVERSATION]
            other = current.value.get("other", 0) + 1
            await MemoryStorage.write(
                self, {CONVERSATION: StoreItem({**current.value, "other": other}, "*")}
            )
            return await super().write(changes, ttl=ttl, unchanged=unchanged)

    storage = Contended()
    await MemoryStorage.write(storage, {CONVERSATION: _item({})})
    state = await turn(storage)
    state["conversation:mine"] = True
    with pytest.raises(StateConflictError, match="gave up after 3") as info:
        await save(storage, state, retries=2)
    assert info.value.scopes == ["conversation"] and info.value.paths == []
    assert len(storage.writes) == 3 and len(storage.reads) == 3  # the load, then 2 re-reads
    assert await storage.stored(CONVERSATION) == {"other": 3}
    for bad in (-1, 1.5, None):
        with pytest.raises(ValueError):
            await save(storage, state, retries=bad)  # type: ignore[arg-type]


def test_the_plan_reserves_every_public_name_of_turn_state() -> None:
    public = {name for name in dir(TurnState) if not name.startswith("_")}
    assert TURN_STATE_NAMES == public
