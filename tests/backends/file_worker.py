"""Child process for test_file_storage: contending increments, or a writer that gets killed.

    python file_worker.py increment ROOT KEY N
        prints "ready", waits for a line on stdin, does N read-modify-write increments of
        `n` with conflict retry, then prints how many conflicts it retried.
    python file_worker.py write-loop ROOT KEY BYTES FIRST
        prints "writing", then writes self-checking documents of about BYTES numbered
        FIRST, FIRST+1, ... forever, printing each number once its write returned.
    python file_worker.py hold-lock ROOT KEY
        takes KEY's lock as FileStorage does, prints "locked", keeps it until a line arrives
        on stdin, then releases it and prints "released".
    python file_worker.py stall-write ROOT KEY
        writes KEY but stops once its temp file is complete on disk (at the temp file's
        fsync), prints "stalled" and waits there, holding KEY's lock, until it is killed.

Run with the repository root on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agent_state.backends import ConflictError, FileStorage, StoreItem
from agent_state.backends.file.filelock import StripedFileLocks
from agent_state.backends.file.storage import LOCK_DIR, LOCK_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike


def checked_document(seq: int, size: int) -> dict[str, object]:
    """A document whose digest proves it is complete: the test rejects any other."""
    blob = f"{seq:012d}" * (size // 12)
    return {"seq": seq, "blob": blob, "digest": hashlib.sha256(blob.encode()).hexdigest()}


async def increment(storage: FileStorage, key: str, times: int) -> int:
    conflicts = 0
    for _ in range(times):
        while True:
            item = (await storage.read([key]))[key]
            try:
                await storage.write({key: StoreItem({"n": item.value["n"] + 1}, item.etag)})
                break
            except ConflictError:
                conflicts += 1
    return conflicts


async def write_loop(storage: FileStorage, key: str, size: int, seq: int) -> None:
    print("writing", flush=True)
    while True:
        await storage.write({key: StoreItem(checked_document(seq, size), "*")})
        print(seq, flush=True)
        seq += 1


async def hold_lock(root: str, key: str) -> None:
    def hold() -> None:
        print("locked", flush=True)
        sys.stdin.readline()

    await StripedFileLocks(Path(root) / LOCK_DIR, timeout=LOCK_TIMEOUT_SECONDS).run([key], hold)
    print("released", flush=True)


async def stall_write(storage: FileStorage, key: str) -> None:
    def stall(fd: FileDescriptorLike) -> None:  # replaces os.fsync (the first: the temp file's)
        print("stalled", flush=True)
        threading.Event().wait()  # until the test kills this process

    os.fsync = stall
    await storage.write({key: StoreItem({"from": "the stalled writer"}, "*")})


async def main(mode: str, root: str, key: str, number: str = "0", first: str = "0") -> None:
    if mode == "hold-lock":
        await hold_lock(root, key)
        return
    storage = FileStorage(root)
    if mode == "increment":
        print("ready", flush=True)
        sys.stdin.readline()
        print(await increment(storage, key, int(number)), flush=True)
    elif mode == "stall-write":
        await stall_write(storage, key)
    else:
        await write_loop(storage, key, int(number), int(first))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
