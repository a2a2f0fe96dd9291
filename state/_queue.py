"""Turn queues: in one process, the turns of one conversation run one at a time, in order.

Turns that share buckets would otherwise conflict and run again; queued, they never do.
A queue exists only while a turn holds or waits for it, so idle conversations cost nothing.
A turn started from inside a turn of the same key (a handler that processes another
activity of its own conversation) does not wait for itself: it runs unqueued.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from contextvars import ContextVar

_HELD: ContextVar[frozenset[tuple[int, Hashable]]] = ContextVar(
    "agent_state_held_queues", default=frozenset()
)


class TurnQueues:
    """FIFO locks by key (asyncio locks wake waiters in arrival order)."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[Hashable, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def turn(self, key: Hashable) -> AsyncIterator[None]:
        """Hold `key`'s queue for the block; turns of other keys run concurrently."""
        held = _HELD.get()
        if (id(self), key) in held:
            yield
            return
        token = _HELD.set(held | {(id(self), key)})
        try:
            async with self._hold(key):
                yield
        finally:
            _HELD.reset(token)

    @asynccontextmanager
    async def _hold(self, key: Hashable) -> AsyncIterator[None]:
        entry = self._queues.get(key)
        if entry is None:
            entry = self._queues[key] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._queues[key]

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)
