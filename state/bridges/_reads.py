"""The versions a turn read, so its writes are conditional on them: kept per asyncio task
(a turn's concurrent saves run in child tasks and see their parent's), or per turn where
`TurnQueueMiddleware` starts one. A key read as missing (or deleted) maps to None."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar, Token

Versions = dict[str, "str | None"]

_HELD: ContextVar[tuple[object, Versions] | None] = ContextVar(
    "agent_state_m365_reads", default=None
)


def current(*, start: bool) -> Versions | None:
    """The versions this turn read; with `start`, a fresh map when this task has none of its
    own (so sibling turns never share one); without, the inherited one or None."""
    held = _HELD.get()
    owner = asyncio.current_task()
    if held is not None and (held[0] is owner or not start):
        return held[1]
    if not start:
        return None
    versions: Versions = {}
    _HELD.set((owner, versions))
    return versions


def begin_turn() -> Token[tuple[object, Versions] | None]:
    """Start an empty map for a turn about to run in this task; `end_turn` restores."""
    return _HELD.set((asyncio.current_task(), {}))


def end_turn(token: Token[tuple[object, Versions] | None]) -> None:
    _HELD.reset(token)
