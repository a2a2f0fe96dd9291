"""Per-key exclusive locks that hold across tasks, storage instances and OS processes.

Keys hash onto a fixed set of lock files (stripes), so lock files never pile up or need
deleting. `run(keys, action)` queues the instance's tasks on each stripe's asyncio lock,
then runs the blocking `action` in one worker-thread call that holds `flock` on the keys'
lock files around it: the event loop never blocks, a lock holder never waits for another
thread, and a cancelled caller cannot cut a critical section short (the thread finishes it
and unlocks).

A wait is bounded: the thread retries a non-blocking `flock` with short, growing pauses
until `timeout` seconds after `run` was called, then raises `StorageUnavailableError`
naming the key, so a stuck or hung holder in another process cannot block callers forever.
The kernel drops a dead process's `flock`, so a killed holder never needs the timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from .._errors import StorageConfigError, StorageUnavailableError
from .._keys import KEYS_REMEMBERED

try:
    import fcntl
except ImportError:  # not POSIX: FileStorage refuses to start, the rest of `backends` imports
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

_FIRST_PAUSE = 0.001
_LONGEST_PAUSE = 0.05
"""Polling a held lock: pauses double from the first up to the longest (seconds)."""


class StripedFileLocks:
    """Locks `stripes` lock files in `directory` (created on first use) on behalf of keys.

    `timeout` (seconds) bounds how long `run` waits for a lock; 0 tries once.
    """

    def __init__(self, directory: Path, *, timeout: float, stripes: int = 256) -> None:
        if fcntl is None:
            raise StorageConfigError("FileStorage needs POSIX file locking (fcntl.flock)")
        self._directory = directory
        self._timeout = timeout
        self._stripes = stripes
        self._names = frozenset(f"{stripe:03d}" for stripe in range(stripes))
        self._task_locks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}
        self.stripe: Callable[[str], str] = lru_cache(maxsize=KEYS_REMEMBERED)(self._stripe_of)
        """The name of the lock file (the stripe) that `key` locks (remembered per key: a
        write asks twice, for its lock and its temp file's name)."""

    def _stripe_of(self, key: str) -> str:
        digest = hashlib.sha256(key.encode()).digest()
        return f"{int.from_bytes(digest[:4], 'big') % self._stripes:03d}"

    def owns(self, name: str) -> bool:
        """Whether `name` is one of these locks' stripe names, as `stripe` returns them."""
        return name in self._names

    async def run(self, keys: list[str], action: Callable[[], T]) -> T:
        """Run blocking `action` in one worker-thread call while holding the locks of `keys`.

        Stripes are taken in one order (sorted), so two batches cannot deadlock. Raises
        `StorageUnavailableError` if a lock is not free within the timeout.
        """
        deadline = time.monotonic() + self._timeout
        stripes = {self.stripe(key): key for key in keys}
        order = sorted(stripes)
        if len(order) == 1:  # one key's batch (most writes): no exit stack
            async with self._task_lock(order[0]):
                return await asyncio.to_thread(self._call_locked, stripes, order, deadline, action)
        async with contextlib.AsyncExitStack() as held:
            for stripe in order:
                await held.enter_async_context(self._task_lock(stripe))
            return await asyncio.to_thread(self._call_locked, stripes, order, deadline, action)

    def run_blocking(self, keys: list[str], action: Callable[[], T]) -> T:
        """`run` for a caller outside an event loop (a FileStorage being built), in its own
        thread."""
        stripes = {self.stripe(key): key for key in keys}
        deadline = time.monotonic() + self._timeout
        return self._call_locked(stripes, sorted(stripes), deadline, action)

    def run_if_free(self, stripe: str, action: Callable[[], object]) -> None:
        """Run blocking `action` holding the stripe's lock if nobody holds it now; never waits."""
        with _flocked(self._directory / stripe, time.monotonic()) as held:
            if held:
                action()

    def _call_locked(
        self, stripes: dict[str, str], order: list[str], deadline: float, action: Callable[[], T]
    ) -> T:
        """Take the flock of each stripe in `order`, then run `action` (in a worker thread)."""
        with contextlib.ExitStack() as held:
            for stripe in order:
                path = self._directory / stripe
                if not held.enter_context(_flocked(path, deadline)):
                    raise StorageUnavailableError(
                        f"file storage: the lock of {stripes[stripe]!r} ({path}) stayed held by"
                        " another process or storage instance for the whole lock_timeout of"
                        f" {self._timeout:g} s"
                    )
            return action()

    def _task_lock(self, stripe: str) -> asyncio.Lock:
        """The stripe's asyncio lock for the running loop (an asyncio lock serves one loop only).

        A storage used from one loop after another (`asyncio.run` per job) gets a new lock per
        loop. The flock alone makes the critical section exclusive; this lock only keeps a
        loop's tasks from each parking a worker thread on the same flock.
        """
        loop = asyncio.get_running_loop()
        entry = self._task_locks.get(stripe)
        if entry is None or entry[0] is not loop:
            entry = self._task_locks[stripe] = (loop, asyncio.Lock())
        return entry[1]


@contextlib.contextmanager
def _flocked(path: Path, deadline: float) -> Iterator[bool]:
    """Hold an exclusive `flock` on `path` for the block; yields False if it was not free
    by `deadline` (a `time.monotonic()` value), after at least one attempt."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        yield _acquire(fd, deadline)
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


def _acquire(fd: int, deadline: float) -> bool:
    """Try `flock` until `deadline`; polling, since a blocking `flock` cannot time out."""
    pause = _FIRST_PAUSE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(pause, remaining))
            pause = min(2 * pause, _LONGEST_PAUSE)
