"""`TurnContext`: what a handler sees of one turn, its activity, its state and its replies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._activity import Activity, check_wire
from ._errors import StateClosedError

if TYPE_CHECKING:
    from ._turn_state import TurnState


class TurnContext:
    """One turn: the incoming `activity`, the turn's `state` and the `replies` sent so far.

    `send` only collects replies; `AgentApplication.process` returns them to the caller,
    which delivers them to the channel, so a `send` after the turn ended raises
    `StateClosedError` (the reply would never be delivered). `attempt` is 1, or more when
    the turn runs again after a conflict (the replies of an earlier run are dropped, never
    returned).
    """

    __slots__ = ("activity", "state", "replies", "attempt")

    def __init__(self, activity: Activity, state: TurnState, attempt: int = 1) -> None:
        self.activity = activity
        self.state = state
        self.replies: list[Activity] = []
        self.attempt = attempt

    @property
    def text(self) -> str:
        """The incoming text, trimmed (`""` when the activity has none)."""
        return (self.activity.text or "").strip()

    async def send(self, message: str | Activity | Mapping[str, Any]) -> Activity:
        """Queue a reply: a text, or an activity whose missing routing fields are filled in.
        `ActivityError` for a reply the storage could not keep in the turn's delivery evidence."""
        if self.state.closed:
            raise StateClosedError("replies")
        if isinstance(message, str):
            try:  # a str is JSON unless it holds a lone surrogate (that UTF-8 refuses)
                message.encode()
            except UnicodeEncodeError:
                check_wire({"text": message})  # raises, naming the field
            reply = self.activity.reply(message)  # the rest: the checked incoming activity's
        else:
            reply = Activity.of(message)
            defaults = self.activity.reply()
            missing = {
                name: getattr(defaults, name)
                for name in (
                    "channel_id",
                    "from_property",
                    "recipient",
                    "conversation",
                    "reply_to_id",
                )
                if getattr(reply, name) is None
            }
            reply = reply.model_copy(update=missing) if missing else reply
        self.replies.append(reply)
        return reply
