"""Activity (wire shape, snake_case, Agents SDK input) and TurnContext replies."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from microsoft_agents.activity import Activity as SdkActivity
from microsoft_agents.activity import ChannelAccount as SdkAccount
from microsoft_agents.activity import ConversationAccount as SdkConversation
from pydantic import ValidationError

from agent_state import (
    Activity,
    ActivityError,
    AgentApplication,
    StateError,
    TurnContext,
    TurnState,
)
from agent_state.backends import MemoryStorage, StoreItem

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
    ctx = TurnContext(Activity.model_validate(WIRE), state=object())  # type: ignore[arg-type]
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


class RecordingStorage(MemoryStorage):
    """MemoryStorage that records every call that could reach a store."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

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
