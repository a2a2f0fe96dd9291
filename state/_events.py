"""What the turn lifecycle reports as it happens: re-runs, merges, conflicts, given-up turns,
redeliveries and refused input. Each event is logged under an `agent_state.*` logger with
ids and counts (never user content) and handed to the listeners `add_event_listener` added
(how `agent_state.telemetry` learns of them). Events happen off the common path only: a turn
that meets no conflict reports nothing, so this costs nothing there."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ._ids import TurnIds

EventListener = Callable[[str, Mapping[str, object]], None]
"""`listener(event, fields)`: an event's name and its ids and counts."""

LOGGERS = {
    "conflict": ("agent_state.turns", logging.DEBUG),
    "merge": ("agent_state.turns", logging.INFO),
    "rerun": ("agent_state.turns", logging.INFO),
    "given_up": ("agent_state.turns", logging.WARNING),
    "redelivery": ("agent_state.delivery", logging.INFO),
    "refused": ("agent_state.input", logging.INFO),
}
"""Each event's logger and level."""

_listeners: list[EventListener] = []


def add_event_listener(listener: EventListener) -> Callable[[], None]:
    """Call `listener(event, fields)` on every event of the lifecycle (see `LOGGERS` for the
    names); returns the function that removes it again."""
    if not callable(listener):
        raise TypeError("add_event_listener() takes a callable listener(event, fields)")
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def report(event: str, ids: TurnIds | None = None, **fields: object) -> None:
    """Log `event` with the turn's ids and its fields (`name=value` pairs in the message and
    as `extra`) and hand it to every listener."""
    if ids is not None:
        named = (("channel", ids.channel_id), ("user", ids.user_id),
                 ("conversation", ids.conversation_id), ("app", ids.app_name))  # fmt: skip
        fields = {**{key: value for key, value in named if value is not None}, **fields}
    name, level = LOGGERS[event]
    logger = logging.getLogger(name)
    if logger.isEnabledFor(level):
        pairs = " ".join(f"{key}={value!r}" for key, value in fields.items())
        logger.log(level, "%s %s", event, pairs, extra={"event": event, "fields": fields})
    for listener in tuple(_listeners):
        listener(event, fields)
