"""What a turn read, so its writes are conditional on it: kept per asyncio task (a turn's
concurrent saves run in child tasks and see their parent's), or per turn where
`TurnQueueMiddleware` starts one."""

from __future__ import annotations

import asyncio
from contextvars import ContextVar, Token
from typing import Any, NamedTuple


class Read(NamedTuple):
    """A key as the turn read it: its version (None: missing, or deleted since) and the
    delivery evidence its document carried (None: none), which a write of the key keeps."""

    etag: str | None
    evidence: Any = None


Versions = dict[str, Read]

_HELD: ContextVar[tuple[object, Versions] | None] = ContextVar(
    "agent_state_m365_reads", default=None
)


def current(*, start: bool) -> Versions | None:
    """What this turn read; with `start`, a fresh map when this task has none of its own (so
    sibling turns never share one); without, the inherited one or None."""
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
