"""The incoming and outgoing message of a turn, in the Bot Framework / Agents SDK wire shape.

`Activity` reads the wire JSON (`channelId`, `from`, ...) and snake_case Python alike, keeps
every field it does not model, and `Activity.of` accepts the Microsoft 365 Agents SDK's
activities as they are. A malformed one raises `ActivityError` naming the field, and so does
one the storage could not keep (the storage's one JSON rule: no lone surrogates, ints within
64 bits, finite numbers, bounded nesting), before any handler sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import to_jsonable_python

from ._errors import StateError
from .backends._json import MAX_DEPTH, JsonRuleError, encode_json

_WIRE = ConfigDict(
    alias_generator=to_camel,
    populate_by_name=True,
    extra="allow",
    ser_json_inf_nan="constants",  # a NaN stays a NaN in the JSON dump, so the rule refuses it
)

KEPT_AT = 4
"""Containers around an activity where the storage keeps it: a reply in the delivery evidence
of a bucket document (`{"$delivered": {name: {"replies": [reply]}}}`). Every activity,
incoming or sent, must meet the JSON rule there, so a reply that echoes any field of the
incoming one can be kept too."""


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
        `from` that is not an object, ...) or one the storage could not keep (see
        `check_storable`), `TypeError` for something that is no activity.
        """
        if isinstance(activity, cls):
            check_storable(activity)
            return activity
        if isinstance(activity, BaseModel):
            try:
                activity = activity.model_dump(mode="json", by_alias=True, exclude_none=True)
            except ValueError as exc:  # pydantic refuses too deep a value
                raise ActivityError("(activity)", f"it has no JSON form: {exc}") from None
        if not isinstance(activity, Mapping):
            raise TypeError(
                f"expected an Activity, a wire dict or a pydantic activity, not "
                f"{type(activity).__name__}"
            )
        try:
            parsed = cls.model_validate(activity)
        except ValidationError as exc:
            first, *others = exc.errors(include_url=False)
            field = ".".join(str(part) for part in first["loc"]) or "(activity)"
            raise ActivityError(field, first["msg"], len(others)) from exc
        check_wire(activity if type(activity) is dict else dict(activity))  # what was kept
        return parsed

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


def received(
    activity: Activity | Mapping[str, Any] | BaseModel,
) -> tuple[Activity, dict[str, Any] | None]:
    """`Activity.of(activity)` and, for an `Activity`, its JSON form (`wire_of`), which checking
    it computes anyway (a turn with an id digests it, see `_delivery.digest`)."""
    if isinstance(activity, Activity):
        return activity, check_storable(activity)
    return Activity.of(activity), None


def wire_of(activity: Activity) -> dict[str, Any]:
    """The wire JSON of an activity (aliases, no None members), as stored and digested."""
    return activity.model_dump(mode="json", by_alias=True, exclude_none=True)


def check_storable(activity: Activity) -> dict[str, Any] | None:
    """`check_wire` of the JSON form of an `Activity` built in Python; that form (`wire_of`),
    None when pydantic could not make it (then the JSON rule refuses the activity)."""
    try:
        wire = wire_of(activity)
    except ValueError:  # pydantic refuses too deep a value: let the JSON rule say where
        check_wire(activity.model_dump(by_alias=True, exclude_none=True))
        return None
    check_wire(wire)
    return wire


def check_wire(wire: dict[str, Any]) -> None:
    """Raise `ActivityError` naming the first field of a wire activity that breaks the
    storage's JSON rule where its delivery evidence keeps it (`KEPT_AT`): a lone surrogate, an int
    beyond 64 bits, a NaN, too deep a nesting, a value of no JSON type. Work is linear in the
    activity's size."""
    try:
        encode_json([[[[wire]]]])  # `_enclosed(wire)` (KEPT_AT lists) written out: every turn
    except JsonRuleError:
        for name, value in wire.items():
            reason = _unstorable(name, value)
            if reason is not None:
                raise ActivityError(name, reason) from None
        raise ActivityError("(activity)", "it is not JSON") from None


def _unstorable(name: str, value: Any) -> str | None:
    """Why the field `name` with `value` cannot be kept, or None when it can."""
    try:
        value = to_jsonable_python(value)
    except ValueError:
        pass  # too deep, cyclic or of an unknown type: the JSON rule below says which
    try:
        encode_json({name: value})
    except JsonRuleError as exc:
        return str(exc)
    try:
        encode_json(_enclosed({name: value}))
    except JsonRuleError:
        return (
            f"it nests deeper than {MAX_DEPTH - KEPT_AT - 1} containers, "
            "the most a field can where its delivery evidence keeps it"
        )
    return None


def _enclosed(wire: Any) -> Any:
    """`wire` as deep as the delivery evidence keeps it (`KEPT_AT` containers around it)."""
    for _ in range(KEPT_AT):
        wire = [wire]
    return wire
