"""The incoming and outgoing message of a turn, in the Bot Framework / Agents SDK wire shape.

`Activity` reads the wire JSON (`channelId`, `from`, ...) and snake_case Python alike, keeps
every field it does not model, and `Activity.of` accepts the Microsoft 365 Agents SDK's
activities as they are. A malformed one raises `ActivityError` naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from ._errors import StateError

_WIRE = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class ActivityError(StateError, ValueError):
    """An incoming activity is malformed: `field` is the first bad field's wire path
    (`"conversation.id"`, `"from"`), `reason` what is wrong with it."""

    def __init__(self, field: str, reason: str, others: int = 0) -> None:
        self.field = field
        self.reason = reason
        self.others = others
        more = f" (and {others} more invalid field{'s' if others > 1 else ''})" if others else ""
        super().__init__(f"activity field {field!r} is invalid: {reason}{more}")


class ChannelAccount(BaseModel):
    """A user or bot on a channel: `{id, name, ...}`."""

    model_config = _WIRE

    id: str | None = None
    name: str | None = None


class ConversationAccount(BaseModel):
    """The conversation an activity belongs to: `{id, ...}`."""

    model_config = _WIRE

    id: str | None = None
    name: str | None = None


class Activity(BaseModel):
    """One message or event; unmodelled wire fields are kept and `model_dump(by_alias=True)`
    gives the wire JSON back.

    From Python, use snake_case: `Activity(channel_id="msteams", from_={"id": "29:1"}, ...)`
    (`from_property=` works too, as in the Microsoft SDK).
    """

    model_config = _WIRE

    type: str = "message"
    id: str | None = None
    channel_id: str | None = None
    from_property: ChannelAccount | None = Field(
        default=None,
        validation_alias=AliasChoices("from", "from_", "from_property"),
        serialization_alias="from",
    )
    recipient: ChannelAccount | None = None
    conversation: ConversationAccount | None = None
    text: str | None = None
    value: Any = None
    reply_to_id: str | None = None

    @classmethod
    def of(cls, activity: Activity | Mapping[str, Any] | BaseModel) -> Activity:
        """Return `activity` as an `Activity`: a wire dict or another SDK's pydantic activity.

        Raises `ActivityError` for a field of the wrong shape (an id that is not a str, a
        `from` that is not an object, ...), `TypeError` for something that is no activity.
        """
        if isinstance(activity, cls):
            return activity
        if isinstance(activity, BaseModel):
            activity = activity.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not isinstance(activity, Mapping):
            raise TypeError(
                f"expected an Activity, a wire dict or a pydantic activity, not "
                f"{type(activity).__name__}"
            )
        try:
            return cls.model_validate(activity)
        except ValidationError as exc:
            first, *others = exc.errors(include_url=False)
            field = ".".join(str(part) for part in first["loc"]) or "(activity)"
            raise ActivityError(field, first["msg"], len(others)) from exc

    def reply(self, text: str | None = None) -> Activity:
        """A message back to the sender, on the same channel and conversation."""
        return Activity(
            type="message",
            channel_id=self.channel_id,
            from_property=self.recipient,
            recipient=self.from_property,
            conversation=self.conversation,
            reply_to_id=self.id,
            text=text,
        )
