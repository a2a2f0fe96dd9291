"""Activity (wire shape, snake_case, Agents SDK input) and TurnContext replies."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from microsoft_agents.activity import Activity as SdkActivity
from microsoft_agents.activity import ChannelAccount as SdkAccount
from microsoft_agents.activity import ConversationAccount as SdkConversation
from pydantic import ValidationError

from agent_state import (
    Activity,
    ActivityError,
    AgentApplication,
    StateClosedError,
    StateError,
    TurnContext,
    TurnState,
)
from agent_state.backends import FileStorage, MemoryStorage, Storage, StoreItem

WIRE = {
    "type": "message",
    "id": "act-1",
    "channelId": "msteams",
    "serviceUrl": "https://smba.example/",
    "from": {"id": "29:1abc", "name": "Ada", "aadObjectId": "00000000-aaaa"},
    "recipient": {"id": "28:bot", "name": "Bot"},
    "conversation": {"id": "19:x@thread.v2", "isGroup": True, "tenantId": "t1"},
    "text": "  Hello  ",
    "value": {"action": "vote", "choice": 2},
    "channelData": {"tenant": {"id": "t1"}},
}


def test_wire_json_reads_every_field_and_keeps_the_rest() -> None:
    activity = Activity.model_validate(WIRE)
    assert (activity.type, activity.id, activity.channel_id) == ("message", "act-1", "msteams")
    assert activity.from_property.id == "29:1abc" and activity.from_property.name == "Ada"
    assert activity.recipient.id == "28:bot"
    assert activity.conversation.id == "19:x@thread.v2"
    assert activity.text == "  Hello  " and activity.value == {"action": "vote", "choice": 2}
    assert (activity.model_extra or {})["serviceUrl"] == "https://smba.example/"
    assert activity.from_property.model_extra == {"aadObjectId": "00000000-aaaa"}


def test_wire_json_round_trips() -> None:
    dumped = Activity.model_validate(WIRE).model_dump(by_alias=True, exclude_none=True)
    assert dumped == WIRE


@pytest.mark.parametrize("sender_arg", ["from_", "from_property"])
def test_snake_case_construction(sender_arg: str) -> None:
    activity = Activity(
        channel_id="telegram", conversation={"id": "c1"}, text="hi", **{sender_arg: {"id": "u1"}}
    )
    assert activity.type == "message"
    assert activity.channel_id == "telegram" and activity.from_property.id == "u1"
    wire = activity.model_dump(by_alias=True, exclude_none=True)
    assert wire == {
        "type": "message",
        "channelId": "telegram",
        "from": {"id": "u1"},
        "conversation": {"id": "c1"},
        "text": "hi",
    }


def test_bad_field_types_are_rejected() -> None:
    with pytest.raises(ValidationError):
        Activity.model_validate({"type": "message", "from": "not an account"})


def test_of_accepts_the_agents_sdk_activity_as_it_is() -> None:
    sdk = SdkActivity(
        type="message",
        id="a9",
        channel_id="msteams",
        service_url="https://smba.example/",
        from_property=SdkAccount(id="29:u", name="Grace", aad_object_id="oid"),
        recipient=SdkAccount(id="28:bot"),
        conversation=SdkConversation(id="19:c", is_group=True),
        text="ping",
        value={"k": 1},
    )
    activity = Activity.of(sdk)
    assert (activity.channel_id, activity.from_property.id, activity.conversation.id) == (
        "msteams",
        "29:u",
        "19:c",
    )
    assert activity.text == "ping" and activity.value == {"k": 1} and activity.id == "a9"
    assert (activity.model_extra or {})["serviceUrl"] == "https://smba.example/"
    assert (activity.from_property.model_extra or {})["aadObjectId"] == "oid"
    assert (activity.conversation.model_extra or {})["isGroup"] is True


def test_an_sdk_sub_channel_reads_as_the_wire_channel_id() -> None:
    wire = {
        "type": "message",
        "channelId": "msteams",
        "from": {"id": "u"},
        "conversation": {"id": "c"},
        "entities": [{"type": "ProductInfo", "id": "COPILOT"}],
    }
    sdk = SdkActivity.model_validate(wire)
    assert sdk.channel_id == "msteams:COPILOT"
    activity = Activity.of(sdk)
    assert activity.channel_id == Activity.of(wire).channel_id == "msteams"
    assert (activity.model_extra or {})["entities"] == [{"type": "ProductInfo", "id": "COPILOT"}]


def test_of_takes_dicts_keeps_ours_and_rejects_other_objects() -> None:
    ours = Activity(text="x")
    assert Activity.of(ours) is ours
    assert Activity.of({"type": "event", "channelId": "c"}).channel_id == "c"
    with pytest.raises(TypeError):
        Activity.of("message")  # type: ignore[arg-type]


def test_reply_goes_back_to_the_sender() -> None:
    incoming = Activity.model_validate(WIRE)
    reply = incoming.reply("hi Ada")
    assert reply.type == "message" and reply.text == "hi Ada"
    assert reply.from_property.id == "28:bot" and reply.recipient.id == "29:1abc"
    assert reply.conversation.id == "19:x@thread.v2" and reply.channel_id == "msteams"
    assert reply.model_dump(by_alias=True, exclude_none=True)["replyToId"] == "act-1"


async def test_send_collects_replies_in_order_and_fills_routing() -> None:
    ctx = TurnContext(Activity.model_validate(WIRE), state=_OpenState())  # type: ignore[arg-type]
    assert ctx.text == "Hello"
    first = await ctx.send("one")
    card = Activity(type="event", value={"card": True}, conversation={"id": "elsewhere"})
    second = await ctx.send(card)
    third = await ctx.send({"type": "typing"})
    assert ctx.replies == [first, second, third]
    assert first.text == "one" and first.recipient.id == "29:1abc"
    assert second.type == "event" and second.value == {"card": True}
    assert second.conversation.id == "elsewhere", "fields the caller set are kept"
    assert second.recipient.id == "29:1abc" and second.reply_to_id == "act-1"
    assert card.recipient is None, "the caller's activity is not mutated"
    assert third.type == "typing" and third.channel_id == "msteams"


async def test_text_is_empty_without_text() -> None:
    ctx = TurnContext(Activity(type="event"), state=object())  # type: ignore[arg-type]
    assert ctx.text == ""


class _Recording(Storage):
    """Records every call that could reach the store (mixed into a backend below)."""

    calls: list[str]

    async def read(self, keys: Iterable[str]) -> dict[str, StoreItem]:
        self.calls.append("read")
        return await super().read(keys)

    async def write(
        self,
        changes: Mapping[str, StoreItem],
        *,
        ttl: float | None = None,
        unchanged: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        self.calls.append("write")
        return await super().write(changes, ttl=ttl, unchanged=unchanged)


class RecordingStorage(_Recording, MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.calls = []


class RecordingFiles(_Recording, FileStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls = []


GOOD = {"type": "message", "channelId": "c", "from": {"id": "u"}, "conversation": {"id": "k"}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"conversation": {"id": 42}}, "conversation.id"),
        ({"from": "ada"}, "from"),
        ({"from": {"id": ["u"]}}, "from.id"),
        ({"type": 7}, "type"),
        ({"text": {"rich": True}}, "text"),
        ({"channelId": 3}, "channelId"),
    ],
)
async def test_a_malformed_wire_activity_is_refused_naming_the_field_before_any_io(
    change: dict[str, object], field: str
) -> None:
    storage = RecordingStorage()
    app = AgentApplication(storage, app_name="bot")
    handled = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        handled.append(ctx.text)

    with pytest.raises(ActivityError) as info:
        await app.process({**GOOD, **change})
    assert isinstance(info.value, ValueError) and isinstance(info.value, StateError)
    assert info.value.field == field and repr(field) in str(info.value)
    assert storage.calls == [] and handled == []
    await app.process({**GOOD, "text": "fine"})
    assert storage.calls == ["read"] and handled == ["fine"]


def test_every_bad_field_is_counted_and_the_first_named() -> None:
    with pytest.raises(ActivityError, match=r"'type' is invalid: .*\(and 1 more invalid field\)"):
        Activity.of({"type": None, "text": 1})


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


HOSTILE = [
    pytest.param({"text": json.loads('"hi \\ud800"')}, "text", "surrogates", id="lone-surrogate"),
    pytest.param({"value": {"n": 2**64}}, "value", "64 bits", id="int-beyond-64-bits"),
    pytest.param({"value": _nested(300)}, "value", "deeper than 254", id="nesting-300"),
    pytest.param({"value": _nested(100_000)}, "value", "deeper than 254", id="nesting-100000"),
    pytest.param({"from": {"id": "u", "name": "\udc00"}}, "from", "surrogates", id="in-a-name"),
    pytest.param({"channelData": {"\ud800": 1}}, "channelData", "surrogates", id="surrogate-key"),
    pytest.param({"value": {"x": float("nan")}}, "value", "NaN", id="nan-in-value"),
    pytest.param({"value": _nested(250)}, "value", "delivery evidence", id="too-deep-to-keep"),
]


@pytest.mark.parametrize("backend", ["memory", "file"])
@pytest.mark.parametrize(("change", "field", "reason"), HOSTILE)
async def test_an_activity_the_storage_cannot_keep_is_refused_before_the_handler_every_time(
    backend: str, change: dict[str, Any], field: str, reason: str, tmp_path: Path
) -> None:
    """Lone surrogates, ints beyond 64 bits, deep nesting, NaN: today the handler runs and
    the save raises a raw TypeError/ValueError, on every redelivery. Refused at the door now,
    naming the field, before any read; a redelivery is refused the same way."""
    storage = RecordingStorage() if backend == "memory" else RecordingFiles(tmp_path)
    app = AgentApplication(storage, app_name="bot")
    handled: list[str | None] = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        handled.append(ctx.activity.id)
        state["user:seen"] = state.get("user:seen", 0) + 1
        await ctx.send(Activity(type="message", value=ctx.activity.value, text=ctx.activity.text))

    hostile = {**GOOD, "id": "a-1", "text": "hi", **change}
    for _delivery in range(2):
        with pytest.raises(ActivityError) as info:
            await app.process(hostile)
        assert info.value.field == field and reason in info.value.reason
    assert handled == [] and storage.calls == []
    assert await app.process({**GOOD, "id": "a-2", "text": "fine"}) != []
    assert handled == ["a-2"] and storage.calls == ["read", "write"]


async def test_a_reply_the_storage_cannot_keep_is_refused_when_sent() -> None:
    ctx = TurnContext(Activity.model_validate(WIRE), state=_OpenState())  # type: ignore[arg-type]
    with pytest.raises(ActivityError) as info:
        await ctx.send("echo \ud800")
    assert info.value.field == "text"
    with pytest.raises(ActivityError) as info:
        await ctx.send({"type": "event", "value": 2**70})
    assert info.value.field == "value"
    with pytest.raises(ActivityError) as info:
        await ctx.send(Activity(type="event", value=_nested(260)))
    assert info.value.field == "value"
    assert ctx.replies == []


class _OpenState:
    """What `send` looks at of a turn's state: whether the turn has ended."""

    closed = False


async def test_send_after_the_turn_ended_raises_like_state_does() -> None:
    """Today a reply sent after `process` returned is silently dropped."""
    app = AgentApplication(MemoryStorage(), app_name="bot")
    kept: list[TurnContext] = []

    @app.message()
    async def handler(ctx: TurnContext, state: TurnState) -> None:
        kept.append(ctx)
        await ctx.send("in time")

    replies = await app.process({**GOOD, "text": "hi"})
    assert [reply.text for reply in replies] == ["in time"]
    with pytest.raises(StateClosedError):
        await kept[0].send("too late")
    with pytest.raises(StateClosedError):
        kept[0].state["user:late"] = 1
    assert [reply.text for reply in kept[0].replies] == ["in time"]


@pytest.mark.parametrize("backend", ["memory", "file"])
async def test_the_deepest_activity_accepted_can_be_echoed_and_kept_in_its_record(
    backend: str, tmp_path: Path
) -> None:
    """At the limit, a reply echoing the value is kept with the turn, and a redelivery gets
    it back without running the handler."""
    storage = RecordingStorage() if backend == "memory" else RecordingFiles(tmp_path)
    app = AgentApplication(storage, app_name="bot")
    handled: list[int] = []

    @app.message()
    async def echo(ctx: TurnContext, state: TurnState) -> None:
        handled.append(1)
        state["user:seen"] = True
        await ctx.send(Activity(type="message", value=ctx.activity.value))

    deepest = {**GOOD, "id": "a-1", "value": _nested(249)}
    first = await app.process(deepest)
    again = await app.process(deepest)
    assert first[0].value == again[0].value == _nested(249) and handled == [1]
    assert storage.calls == ["read", "write", "read"]


def test_an_sdk_activity_the_storage_cannot_keep_is_refused() -> None:
    with pytest.raises(ActivityError) as info:
        Activity.of(SdkActivity(type="message", value={"n": 2**64}))
    assert info.value.field == "value"
    with pytest.raises(ActivityError, match="no JSON form"):
        Activity.of(SdkActivity(type="message", value=_nested(300)))
