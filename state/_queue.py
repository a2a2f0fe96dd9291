"""Turn queues: in one process, the turns of one conversation run one at a time, in order.

Turns that share buckets would otherwise conflict and run again; queued, they never do.
A queue exists only while a turn holds or waits for it, so idle conversations cost nothing.
A turn started from inside a turn of the same key (a handler that processes another
activity of its own conversation) does not wait for itself: it runs unqueued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from contextvars import ContextVar, Token

_HELD: ContextVar[frozenset[tuple[int, Hashable]]] = ContextVar(
    "agent_state_held_queues", default=frozenset()
)


class TurnQueues:
    """FIFO locks by key (asyncio locks wake waiters in arrival order)."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[Hashable, _Queue] = {}

    def turn(self, key: Hashable) -> _Place:
        """`async with queues.turn(key):` holds `key`'s queue for the block; turns of other
        keys run concurrently."""
        return _Place(self._queues, key)

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)


class _Queue:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _Place:
    """One turn's place in a queue (a class, not a generator: every turn pays for it)."""

    __slots__ = ("_queues", "_key", "_queue", "_token")

    def __init__(self, queues: dict[Hashable, _Queue], key: Hashable) -> None:
        self._queues, self._key = queues, key
        self._queue: _Queue | None = None
        self._token: Token[frozenset[tuple[int, Hashable]]] | None = None

    async def __aenter__(self) -> None:
        held = _HELD.get()
        mark = (id(self._queues), self._key)
        if mark in held:  # a turn inside a turn of the same key: it must not wait for itself
            return
        queue = self._queues.get(self._key)
        if queue is None:
            queue = self._queues[self._key] = _Queue()
        queue.users += 1
        try:
            await queue.lock.acquire()
        except BaseException:
            self._leave(queue)
            raise
        self._queue = queue
        self._token = _HELD.set(held | {mark})

    async def __aexit__(self, *exc_info: object) -> None:
        queue = self._queue
        if queue is None:
            return
        if self._token is not None:
            _HELD.reset(self._token)
        queue.lock.release()
        self._leave(queue)

    def _leave(self, queue: _Queue) -> None:
        queue.users -= 1
        if not queue.users:
            del self._queues[self._key]
