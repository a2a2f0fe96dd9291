"""The events of the runs an endpoint streams, kept in a bounded log per run, in this process,
so a client that lost its connection reconnects and receives the rest, then the live tail.

Each event of a run has an id, its number in the run (1, 2, ...), sent as the SSE `id`
field. A run's log holds at most `max_events` events and `max_bytes` bytes of encoded events
(the oldest go first) and is kept `retention` seconds after the run ends; at most `max_runs`
logs are kept (the longest-ended go first, then the oldest running). Events that left the
log cannot be sent again: asking for them is `RunLogGoneError` (HTTP 410). The logs live in
the endpoint's process: a reconnect that reaches another process finds no log (also 410
when the run is recorded in the store, 404 when it is not).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass

from .. import StateError


class RunLogGoneError(StateError, LookupError):
    """The events a reconnect asks for are no longer kept (HTTP 410): they fell out of the
    run's bounded log, its retention ran out, or another process streamed the run."""

    status_code = 410


@dataclass(frozen=True, slots=True)
class RunLogLimits:
    """What the endpoint keeps of its runs' events for reconnecting clients."""

    max_events: int = 10_000
    """Events kept per run (the oldest go first)."""
    max_bytes: int = 16_000_000
    """Bytes of encoded events kept per run (the oldest go first)."""
    retention: float = 300.0
    """Seconds a run's log is kept after the run ended."""
    max_runs: int = 1_000
    """Run logs kept in all (the longest-ended go first)."""


class RunLog:
    """One run's events: appended by the run, followed by any number of streams."""

    __slots__ = ("_limits", "_events", "_bytes", "_next", "_ended", "_followers")

    def __init__(self, limits: RunLogLimits) -> None:
        self._limits = limits
        self._events: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self._next = 1
        self._ended: float | None = None
        """When the run ended (None: still running)."""
        self._followers: set[asyncio.Queue[tuple[int, bytes] | None]] = set()

    @property
    def ended(self) -> float | None:
        """When the run's last event was appended (on the logs' clock); None while it runs."""
        return self._ended

    def append(self, frame: bytes) -> int:
        """Keep one encoded event and hand it to the followers; its id. The oldest events go
        when a bound is passed."""
        number, self._next = self._next, self._next + 1
        self._events.append((number, frame))
        self._bytes += len(frame)
        limits = self._limits
        while len(self._events) > 1 and (
            len(self._events) > limits.max_events or self._bytes > limits.max_bytes
        ):
            self._bytes -= len(self._events.popleft()[1])
        for follower in self._followers:
            follower.put_nowait((number, frame))
        return number

    def end(self, now: float) -> None:
        """The run sent its last event: its followers' streams end."""
        self._ended = now
        for follower in self._followers:
            follower.put_nowait(None)
        self._followers.clear()

    def check(self, after: int) -> None:
        """`RunLogGoneError` unless every event after id `after` is still kept (or to come)."""
        first = self._events[0][0] if self._events else self._next
        if after < 0 or after > self._next - 1 or after + 1 < first:
            raise RunLogGoneError(
                f"the events after {after} are not kept (the log holds {first} to {self._next - 1})"
            )

    def follow(self, after: int) -> AsyncIterator[tuple[int, bytes]]:
        """The events after id `after`, then each new one until the run ends, each exactly
        once: what is kept now and every later append are taken at this call."""
        self.check(after)
        backlog = [event for event in self._events if event[0] > after]
        live: asyncio.Queue[tuple[int, bytes] | None] | None = None
        if self._ended is None:
            live = asyncio.Queue()
            self._followers.add(live)
        return self._drain(backlog, live)

    async def _drain(
        self, backlog: list[tuple[int, bytes]], live: asyncio.Queue[tuple[int, bytes] | None] | None
    ) -> AsyncIterator[tuple[int, bytes]]:
        try:
            for event in backlog:
                yield event
            while live is not None:
                item = await live.get()
                if item is None:
                    return
                yield item
        finally:
            if live is not None:
                self._followers.discard(live)


class RunLogs:
    """The logs of an endpoint's runs, by run key, within `RunLogLimits`."""

    def __init__(self, limits: RunLogLimits, clock: Callable[[], float] = time.time) -> None:
        self.limits, self._clock = limits, clock
        self._logs: OrderedDict[Hashable, RunLog] = OrderedDict()

    def open(self, key: Hashable) -> RunLog:
        """A new, empty log for the run `key` (replacing any other of that key)."""
        self._expire()
        log = self._logs[key] = RunLog(self.limits)
        self._logs.move_to_end(key)
        while len(self._logs) > self.limits.max_runs:
            ended = [k for k, held in self._logs.items() if held.ended is not None]
            del self._logs[ended[0] if ended else next(iter(self._logs))]
        return log

    def end(self, log: RunLog) -> None:
        """The run of `log` ended: it is kept `retention` seconds from now."""
        log.end(self._clock())

    def get(self, key: Hashable) -> RunLog | None:
        """The log of run `key`, None when none is kept."""
        self._expire()
        return self._logs.get(key)

    def drop(self, match: Callable[[Hashable], bool]) -> None:
        """Forget the logs whose keys `match` (a deleted thread's)."""
        for key in [key for key in self._logs if match(key)]:
            del self._logs[key]

    def _expire(self) -> None:
        deadline = self._clock() - self.limits.retention
        for key in [k for k, log in self._logs.items() if (log.ended or deadline) < deadline]:
            del self._logs[key]
