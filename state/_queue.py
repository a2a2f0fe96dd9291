"""Turn queues: in one process, the turns of one conversation run one at a time, in order.

Turns that share buckets would otherwise conflict and run again; queued, they never do.
A queue exists only while a turn holds or waits for it, so idle conversations cost nothing.
A turn started from inside a turn of the same key (a handler that processes another
activity of its own conversation) does not wait for itself: it runs unqueued.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from contextvars import ContextVar, Token

_HELD: ContextVar[tuple[tuple[int, Hashable], ...]] = ContextVar(
    "agent_state_held_queues", default=()
)
"""The queues the current turn (and the tasks it starts) holds: (id of TurnQueues, key)."""


class TurnQueues:
    """FIFO queues by key: a turn waits only when another holds its key."""

    __slots__ = ("_queues",)

    def __init__(self) -> None:
        self._queues: dict[Hashable, deque[asyncio.Future[None]] | None] = {}
        """Each held key's waiters (None until a turn waits: an uncontended turn makes no
        queue)."""

    def turn(self, key: Hashable) -> _Place:
        """`async with queues.turn(key):` holds `key`'s queue for the block; turns of other
        keys run concurrently."""
        return _Place(self._queues, key)

    def __len__(self) -> int:
        """How many keys have a turn running or waiting."""
        return len(self._queues)


class _Place:
    """One turn's place in a queue: `async with`, or `take` / `wait` / `leave` on a hot path
    that should not spend two coroutines on a key nobody else holds.

    The queue of a key is the deque of the turns waiting behind the one that holds it (None
    while none waits); a turn leaving hands the key to the first waiter, or removes the queue
    if none waits."""

    __slots__ = ("_queues", "_key", "_token")

    def __init__(
        self, queues: dict[Hashable, deque[asyncio.Future[None]] | None], key: Hashable
    ) -> None:
        self._queues, self._key = queues, key
        self._token: Token[tuple[tuple[int, Hashable], ...]] | None = None

    async def __aenter__(self) -> None:
        place = self.take()
        if place is not None:
            await self.wait(place)

    async def __aexit__(self, *exc_info: object) -> None:
        self.leave()

    def take(self) -> asyncio.Future[None] | None:
        """Hold the key if it is free (or already held by this turn) and return None; else
        join its queue and return the place to `wait` on."""
        held = _HELD.get()
        mark = (id(self._queues), self._key)
        if mark in held:  # a turn inside a turn of the same key: it must not wait for itself
            return None
        queues, key = self._queues, self._key
        if key in queues:
            waiting = queues[key]
            if waiting is None:
                waiting = queues[key] = deque()
            place = asyncio.get_running_loop().create_future()
            waiting.append(place)
            return place
        queues[key] = None
        self._token = _HELD.set((*held, mark))
        return None

    async def wait(self, place: asyncio.Future[None]) -> None:
        """Wait until the key is handed to this turn (`take` returned `place`), then hold it."""
        waiting = self._queues[self._key]
        assert waiting is not None  # `take` queued `place` in it
        try:
            await place
        except BaseException:
            if place.done() and not place.cancelled():  # handed the key as it was cancelled
                self._hand_on()
            elif place in waiting:
                waiting.remove(place)
            raise
        self._token = _HELD.set((*_HELD.get(), (id(self._queues), self._key)))

    def leave(self) -> None:
        """Give up the key (a no-op for a turn that did not take it itself)."""
        if self._token is not None:
            _HELD.reset(self._token)
            self._token = None
            self._hand_on()

    def _hand_on(self) -> None:
        """Give the key to the first turn still waiting, or drop the empty queue."""
        waiting = self._queues[self._key]
        while waiting:  # None or empty: nobody waits
            place = waiting.popleft()
            if not place.done():
                place.set_result(None)
                return
        del self._queues[self._key]
