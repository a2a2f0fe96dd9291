"""Storage throughput next to its floor: MemoryStorage and FileStorage, ~1 KB and ~50 KB documents.

Run from the repository root:  .venv/bin/python benchmarks/storage.py   (about 20 s)

For each backend, document size and operation (read; write = unconditional; cond. write =
write with the etag the previous write returned) it prints the ops/s of one client awaiting
one call at a time, next to a floor measured in the same run on the same document:
- memory: an orjson round trip (dumps + loads), the cheapest copy that cannot alias (a
  memory write keeps the serialized bytes and parses nothing, so it can beat this floor);
- file write / cond. write: orjson dumps + write a temp file + fsync + rename + fsync of the
  directory, synchronously, without locks or an event loop;
- file read: open + read + orjson loads of the stored file.
The ratio is the backend's ops/s as a percentage of its floor's.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import orjson

from agent_state.backends import ANY, FileStorage, MemoryStorage, Storage, StoreItem

SECONDS = 1.0
KEY = "bench/users/ada"


def document(approx_bytes: int) -> dict[str, object]:
    """A bot-state-like document (nested dicts, lists, strings, numbers) of about that size."""
    item = {"id": 0, "text": "remember to water the plants", "done": False, "tags": ["home"]}
    count = max(1, approx_bytes // len(orjson.dumps(item)))
    items = [{**item, "id": i} for i in range(count)]
    return {"name": "Ada", "locale": "en-GB", "visits": 42, "items": items}


def per_second(operation: Callable[[], object]) -> float:
    operation()
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < SECONDS:
        operation()
        count += 1
    return count / elapsed


async def per_second_async(operation: Callable[[], Awaitable[object]]) -> float:
    await operation()
    count, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < SECONDS:
        await operation()
        count += 1
    return count / elapsed


def atomic_write_floor(directory: Path, value: dict[str, object]) -> None:
    temp, target = directory / ".floor-tmp", directory / "floor"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, orjson.dumps(value))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, target)
    directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)


def round_trip(value: object) -> object:
    """The floor of a copy: one orjson encode and decode."""
    return orjson.loads(orjson.dumps(value))


def read_floor(path: Path) -> object:
    with open(path, "rb") as file:
        return orjson.loads(file.read())


async def backend_rates(storage: Storage, value: dict[str, object]) -> dict[str, float]:
    async def write() -> str:
        return (await storage.write({KEY: StoreItem(value, ANY)}))[KEY]

    rates = {"write": await per_second_async(write)}
    rates["read"] = await per_second_async(lambda: storage.read([KEY]))
    etag = await write()

    async def conditional_write() -> None:
        nonlocal etag
        etag = (await storage.write({KEY: StoreItem(value, etag)}))[KEY]

    rates["cond. write"] = await per_second_async(conditional_write)
    return rates


async def main() -> None:
    directory = Path(tempfile.mkdtemp(prefix="agent-state-bench-"))
    rows = []
    try:
        for label, size in (("1 KB", 1_000), ("50 KB", 50_000)):
            value = document(size)
            actual = f"{label} ({len(orjson.dumps(value)):,} B)"
            copy_floor = per_second(partial(round_trip, value))
            for op, rate in (await backend_rates(MemoryStorage(), value)).items():
                rows.append(("memory", actual, op, rate, "orjson round trip", copy_floor))

            storage = FileStorage(directory / "store")
            rates = await backend_rates(storage, value)
            stored = storage.path_for(KEY)
            floors = {
                "read": ("open+read+loads", per_second(partial(read_floor, stored))),
                "write": (
                    "atomic write+fsyncs",
                    per_second(partial(atomic_write_floor, directory, value)),
                ),
            }
            floors["cond. write"] = floors["write"]
            for op, rate in rates.items():
                rows.append(("file", actual, op, rate, *floors[op]))
            await storage.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    header = ("backend", "document", "op", "ops/s", "floor", "floor ops/s", "ratio")
    print(
        f"{header[0]:<8}{header[1]:<20}{header[2]:<13}{header[3]:>10}  {header[4]:<20}"
        f"{header[5]:>12}{header[6]:>8}"
    )
    for backend, doc, op, rate, floor, floor_rate in rows:
        print(
            f"{backend:<8}{doc:<20}{op:<13}{rate:>10,.0f}  {floor:<20}{floor_rate:>12,.0f}"
            f"{rate / floor_rate:>8.0%}"
        )
    print(
        f"\nfile store in {tempfile.gettempdir()}; {os.cpu_count()} CPUs; "
        f"Python {sys.version.split()[0]}; {SECONDS:.0f} s per measurement"
    )


if __name__ == "__main__":
    asyncio.run(main())
