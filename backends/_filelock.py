"""Per-key exclusive locks that hold across tasks, storage instances and OS processes.

Keys hash onto a fixed set of lock files, so lock files never pile up or need deleting.
`run(key, action)` queues the instance's tasks on an asyncio lock, then runs the blocking
`action` in one worker-thread call that holds `flock` on the key's lock file around it: the
event loop never blocks, a lock holder never waits for another thread, and a cancelled
caller cannot cut a critical section short (the thread finishes it and unlocks).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ._errors import StorageConfigError

try:
    import fcntl
except ImportError:  # not POSIX: FileStorage refuses to start, the rest of `backends` imports
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")


class StripedFileLocks:
    """Locks `stripes` lock files in `directory` (created on first use) on behalf of keys."""

    def __init__(self, directory: Path, stripes: int = 256) -> None:
        if fcntl is None:
            raise StorageConfigError("FileStorage needs POSIX file locking (fcntl.flock)")
        self._directory = directory
        self._stripes = stripes
        self._task_locks: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = {}

    async def run(self, key: str, action: Callable[[], T]) -> T:
        """Run blocking `action` in a worker thread while holding the lock of `key`."""
        digest = hashlib.sha256(key.encode()).digest()
        stripe = int.from_bytes(digest[:4], "big") % self._stripes
        async with self._task_lock(stripe):
            return await asyncio.to_thread(_call_locked, self._directory / f"{stripe:03d}", action)

    def _task_lock(self, stripe: int) -> asyncio.Lock:
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


def _call_locked(path: Path, action: Callable[[], T]) -> T:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return action()
    finally:
        os.close(fd)  # closing the only descriptor releases the flock
