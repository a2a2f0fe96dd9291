"""AgentApplication: routing, hooks, errors, one read and one write per turn, isolation."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from microsoft_agents.activity import Activity as SdkActivity
from microsoft_agents.activity import ChannelAccount as SdkAccount
from microsoft_agents.activity import ConversationAccount as SdkConversation

from agent_state import (
    Activity,
    AgentApplication,
    AgentState,
    MissingIdError,
    StateConflictError,
    TurnContext,
    TurnIds,
    TurnState,
    app_key,
    conversation_key,
    parse_key,
    session_key,
    user_key,
)
from agent_state.backends import MemoryStorage, StorageUnavailableError, StoreItem


class CountingStorage(MemoryStorage):
    """MemoryStorage that counts batched calls."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = self.writes = 0

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        self.reads += 1
        return await super().read(keys)

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        self.writes += 1
        return await super().write(changes, ttl=ttl, unchanged=unchanged)


def msg(
    text: str | None = "hi",
    *,
    user: str = "u1",
    conversation: str = "c1",
    channel: str = "test",
    type: str = "message",
    **fields: Any,
) -> Activity:
    return Activity(
        type=type,
        channel_id=channel,
        from_={"id": user, "name": user.upper()},
        recipient={"id": "bot"},
        conversation={"id": conversation},
        text=text,
        **fields,
    )


async def stored(storage: MemoryStorage) -> dict[str, dict[str, Any]]:
    keys = [key async for key in storage.list("")]
    return {key: item.value for key, item in (await storage.read(keys)).items()}


def texts(replies: list[Activity]) -> list[str | None]:
    return [reply.text for reply in replies]


@pytest.fixture
def storage() -> CountingStorage:
    return CountingStorage()


@pytest.fixture
def app(storage: CountingStorage) -> AgentApplication:
    return AgentApplication(storage, app_name="bot")


# --- routing ---------------------------------------------------------------------------------


async def test_a_str_matches_the_whole_trimmed_text_ignoring_case(app: AgentApplication) -> None:
    @app.message("help")
    async def on_help(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send("help!")

    assert texts(await app.process(msg("  HeLp \n"))) == ["help!"]
    assert await app.process(msg("help me")) == []
    assert await app.process(msg("help", type="event")) == [], "only messages"


async def test_a_regex_is_searched_in_the_text(app: AgentApplication) -> None:
    @app.message(re.compile(r"order (\d+)"))
    async def on_order(ctx: TurnContext, state: TurnState) -> None:
        number = re.search(r"order (\d+)", ctx.text).group(1)
        await ctx.send(f"order {number}")

    assert texts(await app.process(msg("where is my order 42?"))) == ["order 42"]
    assert await app.process(msg("Order 42")) == [], "a compiled regex keeps its own flags"


async def test_message_without_pattern_takes_every_message(app: AgentApplication) -> None:
    @app.message()
    async def on_any(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send(f"echo {ctx.activity.text}")

    assert texts(await app.process(msg("anything"))) == ["echo anything"]
    assert await app.process(msg(type="typing")) == []


async def test_activity_routes_by_type(app: AgentApplication) -> None:
    @app.activity("conversationUpdate")
    async def on_update(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send("welcome")

    assert texts(await app.process(msg(type="conversationUpdate", text=None))) == ["welcome"]
    assert await app.process(msg("conversationUpdate")) == []


async def test_route_takes_sync_and_async_predicates(app: AgentApplication) -> None:
    @app.route(lambda ctx: ctx.activity.value == {"vote": 1})
    async def on_vote(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send("sync")

    async def is_admin(ctx: TurnContext) -> bool:
        await asyncio.sleep(0)
        return ctx.activity.from_property.id == "admin"

    @app.route(is_admin)
    async def on_admin(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send("async")

    assert texts(await app.process(msg(value={"vote": 1}))) == ["sync"]
    assert texts(await app.process(msg(user="admin"))) == ["async"]
    assert await app.process(msg()) == []


async def test_first_matching_route_in_registration_order_wins(app: AgentApplication) -> None:
    calls = []

    @app.route(lambda ctx: False)
    async def never(ctx: TurnContext, state: TurnState) -> None:
        calls.append("never")

    @app.message(re.compile("a"))
    async def first(ctx: TurnContext, state: TurnState) -> None:
        calls.append("first")

    @app.message("abc")
    async def second(ctx: TurnContext, state: TurnState) -> None:
        calls.append("second")

    await app.process(msg("abc"))
    assert calls == ["first"]


async def test_decorators_return_the_function_and_reject_bad_arguments(
    app: AgentApplication,
) -> None:
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        pass

    assert app.message("x")(handler) is handler
    assert app.route(lambda ctx: True)(handler) is handler
    with pytest.raises(TypeError):
        app.message(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        app.activity("")
    with pytest.raises(TypeError):
        app.route("message")  # type: ignore[arg-type]


# --- state around the turn -------------------------------------------------------------------


async def test_handler_gets_context_and_state_and_state_persists(
    app: AgentApplication, storage: CountingStorage
) -> None:
    seen = []

    @app.message()
    async def count(ctx: TurnContext, state: TurnState) -> None:
        seen.append(ctx.state is state)
        state["user:visits"] = state.get("user.visits", 0) + 1
        state["conversation:messages"] = state.get("conversation.messages", 0) + 1
        state["topic"] = ctx.text
        state["app:turns"] = state.get("app.turns", 0) + 1
        state["temp:scratch"] = "never stored"
        await ctx.send(f"{state['user:visits']}/{state['conversation:messages']}")

    assert texts(await app.process(msg("one", user="ada"))) == ["1/1"]
    assert texts(await app.process(msg("two", user="ada"))) == ["2/2"]
    assert texts(await app.process(msg("three", user="bob"))) == ["1/3"]
    assert seen == [True, True, True]
    assert await stored(storage) == {
        user_key("test", "ada"): {"visits": 2},
        user_key("test", "bob"): {"visits": 1},
        conversation_key("test", "c1"): {"messages": 3},
        session_key("test", "c1", "ada", agent="bot"): {"topic": "two"},
        session_key("test", "c1", "bob", agent="bot"): {"topic": "three"},
        app_key("bot"): {"turns": 3},
        # each user's index entry of their session, written with the session's first save
        f"{user_key('test', 'ada')}/sessions/c1": {"session": session_key("test", "c1", "ada")},
        f"{user_key('test', 'bob')}/sessions/c1": {"session": session_key("test", "c1", "bob")},
    }


async def test_one_read_and_one_write_per_turn_and_none_when_unchanged(
    app: AgentApplication, storage: CountingStorage
) -> None:
    @app.message("write")
    async def write(ctx: TurnContext, state: TurnState) -> None:
        state["user:a"] = 1
        state["conversation:b"] = 2
        state["c"] = 3

    @app.message("read")
    async def read(ctx: TurnContext, state: TurnState) -> None:
        await ctx.send(str(state.get("user.a")))

    await app.process(msg("write"))
    assert (storage.reads, storage.writes) == (1, 1)
    assert texts(await app.process(msg("read"))) == ["1"]
    assert (storage.reads, storage.writes) == (2, 1)
    await app.process(msg("nothing routes this"))
    assert (storage.reads, storage.writes) == (3, 1)


async def test_ids_come_from_the_activity_and_the_namespace(storage: CountingStorage) -> None:
    app = AgentApplication(storage, app_name="bot", namespace="tenant-a")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["user:x"] = state["conversation:x"] = state["x"] = state["app:x"] = 1

    await app.process(msg(user="29:1/abc", conversation="19:x@thread.v2", channel="msteams"))
    assert set(await stored(storage)) == {
        user_key("msteams", "29:1/abc", namespace="tenant-a"),
        conversation_key("msteams", "19:x@thread.v2", namespace="tenant-a"),
        session_key("msteams", "19:x@thread.v2", "29:1/abc", agent="bot", namespace="tenant-a"),
        app_key("bot", namespace="tenant-a"),
        user_key("msteams", "29:1/abc", namespace="tenant-a") + "/sessions/19:x@thread.v2",
    }


async def test_process_accepts_wire_dicts_and_agents_sdk_activities(
    app: AgentApplication, storage: CountingStorage
) -> None:
    @app.message("hello")
    async def on_hello(ctx: TurnContext, state: TurnState) -> None:
        state["user:name"] = ctx.activity.from_property.name
        await ctx.send(f"hi {ctx.activity.from_property.name}")

    wire = {
        "type": "message",
        "channelId": "msteams",
        "from": {"id": "29:a", "name": "Ada"},
        "conversation": {"id": "19:c"},
        "recipient": {"id": "28:bot"},
        "text": "hello",
    }
    sdk = SdkActivity(
        type="message",
        channel_id="msteams",
        from_property=SdkAccount(id="29:g", name="Grace"),
        conversation=SdkConversation(id="19:c"),
        recipient=SdkAccount(id="28:bot"),
        text="Hello",
        service_url="https://smba.example/",
    )
    assert texts(await app.process(wire)) == ["hi Ada"]
    replies = await app.process(sdk)
    assert texts(replies) == ["hi Grace"]
    assert replies[0].recipient.id == "29:g" and replies[0].conversation.id == "19:c"
    assert (await stored(storage))[user_key("msteams", "29:g")] == {"name": "Grace"}


async def test_custom_scopes_are_loaded_and_saved_in_the_same_batch(
    storage: CountingStorage,
) -> None:
    class TeamState(AgentState):
        scope = "team"

        @classmethod
        def key_for(cls, ids: TurnIds) -> str:
            return f"{ids.channel_id}/teams/all"

    app = AgentApplication(storage, app_name="bot", custom_scopes=[TeamState])

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["team:size"] = state.get("team.size", 0) + 1
        state["user:seen"] = True

    await app.process(msg(user="a"))
    await app.process(msg(user="b"))
    assert (storage.reads, storage.writes) == (2, 2)
    assert (await stored(storage))["test/teams/all"] == {"size": 2}


async def test_a_turn_without_a_conversation_cannot_touch_conversation_state(
    app: AgentApplication, storage: CountingStorage
) -> None:
    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        state["user:ok"] = True
        state["conversation:x"] = 1

    errors = []

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        errors.append(error)

    await app.process(Activity(channel_id="test", from_={"id": "u1"}, text="hi"))
    assert len(errors) == 1 and isinstance(errors[0], MissingIdError)
    assert await stored(storage) == {}


# --- hooks -----------------------------------------------------------------------------------


async def test_hooks_run_around_the_handler_and_their_changes_are_saved(
    app: AgentApplication, storage: CountingStorage
) -> None:
    order = []

    @app.before_turn
    async def first(ctx: TurnContext, state: TurnState) -> None:
        order.append("before-1")
        state["temp:started"] = True

    @app.before_turn
    async def second(ctx: TurnContext, state: TurnState) -> None:  # returning None continues
        order.append("before-2")

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        order.append(f"handler started={state['temp:started']}")

    @app.after_turn
    async def after(ctx: TurnContext, state: TurnState) -> None:
        order.append("after")
        state["user:last_text"] = ctx.text

    await app.process(msg("bye"))
    assert order == ["before-1", "before-2", "handler started=True", "after"]
    assert await stored(storage) == {user_key("test", "u1"): {"last_text": "bye"}}


async def test_before_turn_returning_false_ends_the_turn_and_saves(
    app: AgentApplication, storage: CountingStorage
) -> None:
    calls = []

    @app.before_turn
    async def gate(ctx: TurnContext, state: TurnState) -> bool:
        state["user:attempts"] = state.get("user.attempts", 0) + 1
        if ctx.text == "blocked":
            await ctx.send("not allowed")
            return False
        return True

    @app.before_turn
    async def later(ctx: TurnContext, state: TurnState) -> None:
        calls.append("later hook")

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        calls.append("handler")

    @app.after_turn
    async def after(ctx: TurnContext, state: TurnState) -> None:
        calls.append("after")

    assert texts(await app.process(msg("blocked"))) == ["not allowed"]
    assert calls == []
    assert (await stored(storage))[user_key("test", "u1")] == {"attempts": 1}
    await app.process(msg("fine"))
    assert calls == ["later hook", "handler", "after"]


async def test_after_turn_returning_false_stops_later_after_hooks_only(
    app: AgentApplication, storage: CountingStorage
) -> None:
    calls = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        state["done"] = True

    @app.after_turn
    async def stop(ctx: TurnContext, state: TurnState) -> bool:
        calls.append("stop")
        return False

    @app.after_turn
    async def skipped(ctx: TurnContext, state: TurnState) -> None:
        calls.append("skipped")

    await app.process(msg())
    assert calls == ["stop"]
    assert (await stored(storage))[session_key("test", "c1", "u1", agent="bot")] == {"done": True}


# --- errors ----------------------------------------------------------------------------------


async def test_a_raising_handler_saves_nothing_and_reaches_the_error_handler(
    app: AgentApplication, storage: CountingStorage
) -> None:
    seen: list[object] = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        state["user:changed"] = True
        await ctx.send("working on it")
        raise RuntimeError("boom")

    @app.after_turn
    async def after(ctx: TurnContext, state: TurnState) -> None:
        seen.append("after")

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        seen.append((type(error).__name__, str(error), ctx.state.get("user.changed")))
        await ctx.send("sorry")

    replies = await app.process(msg())
    assert texts(replies) == ["working on it", "sorry"]
    assert seen == [("RuntimeError", "boom", True)], "after-turn hooks do not run"
    assert await stored(storage) == {} and storage.writes == 0


async def test_without_an_error_handler_the_exception_propagates(
    app: AgentApplication, storage: CountingStorage
) -> None:
    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        state["user:changed"] = True
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await app.process(msg())
    assert await stored(storage) == {}


@pytest.mark.parametrize("where", ["before", "selector", "after"])
async def test_errors_in_hooks_and_selectors_reach_the_error_handler(
    app: AgentApplication, storage: CountingStorage, where: str
) -> None:
    def fail(step: str) -> None:
        if step == where:
            raise ValueError(step)

    @app.before_turn
    async def before(ctx: TurnContext, state: TurnState) -> None:
        state["user:x"] = 1
        fail("before")

    def selector(ctx: TurnContext) -> bool:
        fail("selector")
        return True

    @app.route(selector)
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        pass

    @app.after_turn
    async def after(ctx: TurnContext, state: TurnState) -> None:
        fail("after")

    errors = []

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        errors.append(str(error))

    assert await app.process(msg()) == []
    assert errors == [where]
    assert await stored(storage) == {}


async def test_an_error_handler_that_raises_propagates(app: AgentApplication) -> None:
    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        raise RuntimeError("first")

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        raise LookupError("second") from error

    with pytest.raises(LookupError) as info:
        await app.process(msg())
    assert isinstance(info.value.__cause__, RuntimeError)


async def test_only_one_error_handler(app: AgentApplication) -> None:
    @app.error
    async def one(ctx: TurnContext, error: Exception) -> None:
        pass

    with pytest.raises(ValueError):
        app.error(one)


async def test_a_save_conflict_propagates_without_the_error_handler(
    app: AgentApplication, storage: CountingStorage
) -> None:
    """Another turn changes the same value during every run of this one: the runs are
    bounded, then process raises (the error handler is for the application's own errors)."""
    errors = []
    app.turn_attempts = 3
    runs: list[int] = []

    @app.message("inner")
    async def inner(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:owner"] = f"{ctx.activity.from_property.id}-{len(runs)}"

    @app.message("outer")
    async def outer(ctx: TurnContext, state: TurnState) -> None:
        runs.append(ctx.attempt)
        state["conversation:owner"] = "outer"
        await app.process(msg("inner", user="someone-else"))
        await ctx.send("outer done")

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        errors.append(error)

    await app.process(msg("inner"))  # the conversation exists before both turns read it
    with pytest.raises(StateConflictError) as info:
        await app.process(msg("outer"))
    assert info.value.scopes == ["conversation"] and info.value.paths == ["/owner"]
    assert errors == [] and runs == [1, 2, 3] and "3 runs" in str(info.value)
    stored_now = await stored(storage)
    assert stored_now[conversation_key("test", "c1")] == {"owner": "someone-else-3"}


async def test_overlapping_turns_that_change_different_members_both_land(
    app: AgentApplication, storage: CountingStorage
) -> None:
    """Group chat: Grace's turn runs inside Ada's, both edit the conversation, both are kept."""

    @app.message("grace")
    async def inner(ctx: TurnContext, state: TurnState) -> None:
        state.set("conversation.votes.grace", "yes")
        state["conversation:messages"] = state.get("conversation.messages", 0) + 1

    @app.message("ada")
    async def outer(ctx: TurnContext, state: TurnState) -> None:
        state["conversation:topic"] = "release"
        await app.process(msg("grace", user="grace"))
        await ctx.send("ada done")

    assert texts(await app.process(msg("ada", user="ada"))) == ["ada done"]
    assert (await stored(storage))[conversation_key("test", "c1")] == {
        "votes": {"grace": "yes"},
        "messages": 1,
        "topic": "release",
    }


async def test_storage_errors_on_load_propagate() -> None:
    class DownStorage(MemoryStorage):
        async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:  # the turn's one read
            raise StorageUnavailableError("store is down")

    app = AgentApplication(DownStorage(), app_name="bot")
    called: list[object] = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        called.append("handler")

    @app.error
    async def on_error(ctx: TurnContext, error: Exception) -> None:
        called.append(error)

    with pytest.raises(StorageUnavailableError, match="store is down"):
        await app.process(msg())
    assert called == []


# --- concurrency -----------------------------------------------------------------------------


async def test_concurrent_turns_share_no_state(storage: CountingStorage) -> None:
    """Hundreds of interleaved turns on one app: every stored value sits under its own key."""
    app = AgentApplication(storage, app_name="bot")

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        user, conversation = ctx.activity.from_property.id, ctx.activity.conversation.id
        state["temp:me"] = user
        await asyncio.sleep(0)  # let the other turns run between every step
        state["user:id"] = user
        state["user:turns"] = state.get("user.turns", 0) + 1
        await asyncio.sleep(0)
        state["conversation:id"] = conversation
        state["session"] = {"user": user, "conversation": conversation}
        await asyncio.sleep(0)
        assert state["temp:me"] == user
        await ctx.send(f"{user}@{conversation}")

    pairs = [(f"user-{i}", f"conv-{i % 150}-{i // 150}") for i in range(300)]
    for _ in range(2):  # the second round reads what the first wrote
        results = await asyncio.gather(
            *(app.process(msg(user=u, conversation=c)) for u, c in pairs)
        )
        assert [texts(r) for r in results] == [[f"{u}@{c}"] for u, c in pairs]

    assert storage.reads == 2 * len(pairs) and storage.writes == 2 * len(pairs)
    documents = await stored(storage)
    assert len(documents) == 4 * len(pairs)  # user, conversation, session, index entry
    for key, value in documents.items():
        parsed = parse_key(key)
        if parsed.kind == "user_session":
            assert value == {"session": session_key("test", parsed.record or "", parsed.user or "")}
        elif parsed.scope == "user":
            assert value == {"id": parsed.user, "turns": 2}
        elif parsed.scope == "conversation":
            assert value == {"id": parsed.conversation}
        else:
            assert parsed.scope == "session"
            assert value == {"session": {"user": parsed.user, "conversation": parsed.conversation}}


# --- registration checks ---------------------------------------------------------------------


def plain(ctx: TurnContext, state: TurnState) -> None:
    return None


class AsyncCallable:
    def __init__(self, text: str) -> None:
        self.text = text

    async def __call__(self, ctx: TurnContext, state: TurnState) -> None:
        await ctx.send(self.text)


class PlainCallable:
    def __call__(self, ctx: TurnContext, state: TurnState) -> None:
        return None


def registrations(app: AgentApplication) -> dict[str, Callable[[Any], object]]:
    return {
        "route handler": app.message(),
        "before_turn hook": app.before_turn,
        "after_turn hook": app.after_turn,
        "error handler": app.error,
    }


@pytest.mark.parametrize(
    "function",
    [plain, lambda ctx, state: None, PlainCallable(), functools.partial(plain, object())],  # type: ignore[arg-type]  # refused at run time
    ids=["function", "lambda", "callable-object", "partial"],
)
@pytest.mark.parametrize(
    "role", ["route handler", "before_turn hook", "after_turn hook", "error handler"]
)
def test_a_plain_function_is_refused_at_registration_naming_it(
    app: AgentApplication, role: str, function: Callable[..., object]
) -> None:
    with pytest.raises(TypeError, match=f"the {role} .* must be an async function") as info:
        registrations(app)[role](function)
    assert repr(function) in str(info.value)
    assert app._routes == [] and app._before == app._after == [] and app._on_error is None


async def test_async_callables_partials_and_methods_are_accepted(
    app: AgentApplication, storage: CountingStorage
) -> None:
    class Bot:
        async def on_message(self, ctx: TurnContext, state: TurnState) -> None:
            await ctx.send("method")

    async def greet(greeting: str, ctx: TurnContext, state: TurnState) -> None:
        await ctx.send(greeting)

    app.message("callable")(AsyncCallable("callable"))
    app.message("partial")(functools.partial(greet, "partial"))
    app.message("method")(Bot().on_message)
    app.before_turn(functools.partial(AsyncCallable("hook")))
    for text in ("callable", "partial", "method"):
        assert texts(await app.process(msg(text))) == ["hook", text]
