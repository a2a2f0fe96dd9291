"""Child process for test_file_storage: contending increments, or a writer that gets killed.

    python file_worker.py increment ROOT KEY N
        prints "ready", waits for a line on stdin, does N read-modify-write increments of
        `n` with conflict retry, then prints how many conflicts it retried.
    python file_worker.py write-loop ROOT KEY BYTES FIRST
        prints "writing", then writes self-checking documents of about BYTES numbered
        FIRST, FIRST+1, ... forever, printing each number once its write returned.

Run with the repository root on PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys

from agent_state.backends import ConflictError, FileStorage, StoreItem


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


async def main(mode: str, root: str, key: str, number: str, first: str = "0") -> None:
    storage = FileStorage(root)
    if mode == "increment":
        print("ready", flush=True)
        sys.stdin.readline()
        print(await increment(storage, key, int(number)), flush=True)
    else:
        await write_loop(storage, key, int(number), int(first))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
