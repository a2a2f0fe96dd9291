"""Turns under contention: one conversation vs many, in one process and across processes.

Each scenario runs TURNS concurrent `AgentApplication` turns and checks that every one of
them was applied (the counter or the members end exactly right). It prints turns/s, runs
per turn (`ctx.attempt`), re-runs and merges (save writes beyond one per run):

- shared counter: one conversation's `count` vs an app-wide `count` over TURNS conversations;
- distinct members: each turn sets its own member of the conversation (or app) bucket.

Then PROCESSES OS processes run turns on one conversation at once (file and Redis only).
Targets: every turn succeeds; one conversation runs at >= 50 % of the many-conversation
throughput in one process; across processes <= 2 runs per turn on average.

Run: .venv/bin/python benchmarks/contention.py [--turns 50] [--redis-url URL]
Without --redis-url (or $AGENT_STATE_REDIS_URL) it starts a private redis-server on a free
port and stops it by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from _support import free_port, server

from agent_state import AgentApplication, TurnContext, TurnState, open_storage
from agent_state.backends import Storage

PROCESSES = 4


@dataclass
class Outcome:
    turns: int
    seconds: float
    runs: int
    writes: int

    def row(self, name: str) -> str:
        reruns = self.runs - self.turns
        merges = max(0, self.writes - self.runs)
        return (
            f"{name:<44} {self.turns / self.seconds:>9,.0f} {self.runs / self.turns:>10.2f} "
            f"{reruns:>8} {merges:>7}"
        )


def counting(storage: Storage) -> list[int]:
    """Count `storage.write` calls (one per save attempt, one more per merge)."""
    writes = [0]
    write = storage.write

    async def counted(*args: Any, **kwargs: Any) -> dict[str, str]:
        writes[0] += 1
        return await write(*args, **kwargs)

    storage.write = counted  # type: ignore[method-assign]
    return writes


def message(user: str, conversation: str) -> dict[str, Any]:
    return {"type": "message", "channelId": "bench", "text": "hi", "from": {"id": user},
            "conversation": {"id": conversation}}  # fmt: skip


def application(storage: Storage, runs: list[int], mode: str, shared: str) -> AgentApplication:
    """`mode` counter: `shared` bucket's count += 1; members: its own member := 1."""
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def turn(ctx: TurnContext, state: TurnState) -> None:
        runs[0] += 1
        user = ctx.activity.from_property.id if ctx.activity.from_property else "?"
        if mode == "counter":
            state[f"{shared}:count"] = state.get(f"{shared}.count", 0) + 1
        else:
            state.set(f"{shared}.members.{user}", 1)

    return app


async def scenario(url: str, mode: str, spread: bool, turns: int) -> Outcome:
    storage = open_storage(url)
    writes = counting(storage)
    runs = [0]
    shared = "app" if spread else "conversation"
    app = application(storage, runs, mode, shared)
    activities = [message(f"u{i}", f"c{i}" if spread else "c0") for i in range(turns)]
    start = time.perf_counter()
    await asyncio.gather(*(app.process(activity) for activity in activities))
    seconds = time.perf_counter() - start
    key = "app/bench" if spread else "bench/conversations/c0"
    value = (await storage.read([key]))[key].value
    expected_ok = (
        value.get("count") == turns if mode == "counter" else len(value["members"]) == turns
    )
    await storage.close()
    if not expected_ok:
        raise SystemExit(f"LOST UPDATES in {mode}/{'spread' if spread else 'one'}: {value}")
    return Outcome(turns, seconds, runs[0], writes[0])


async def worker(url: str, turns: int, index: int) -> None:
    """One of the processes: `turns` turns on conversation c0; prints runs and writes."""
    storage = open_storage(url)
    writes = counting(storage)
    runs = [0]
    app = application(storage, runs, "counter", "conversation")
    await asyncio.gather(*(app.process(message(f"p{index}u{i}", "c0")) for i in range(turns)))
    await storage.close()
    print(runs[0], writes[0], flush=True)


def across_processes(url: str, turns: int) -> tuple[Outcome, int]:
    per_process = max(1, turns // PROCESSES)
    start = time.perf_counter()
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, str(per_process), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    results = [worker.communicate()[0].split() for worker in workers]
    seconds = time.perf_counter() - start
    if any(worker.returncode for worker in workers):
        raise SystemExit("a worker process failed")
    runs = sum(int(result[0]) for result in results)
    writes = sum(int(result[1]) for result in results)
    storage = open_storage(url)
    count = asyncio.run(_count(storage))
    return Outcome(per_process * PROCESSES, seconds, runs, writes), count


async def _count(storage: Storage) -> int:
    key = "bench/conversations/c0"
    value = (await storage.read([key]))[key].value
    await storage.close()
    return int(value["count"])


@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--dir", folder]
        with server(command, port, "redis-server"):
            yield f"redis://127.0.0.1:{port}/0"


def backends(redis_url: str, folder: str) -> dict[str, Callable[[], str]]:
    """Each backend as a factory of a fresh store's URL (a new folder or namespace per run)."""
    return {
        "memory": lambda: "memory://",
        "file": lambda: f"file://{tempfile.mkdtemp(dir=folder)}",
        "redis": lambda: f"{redis_url}?namespace=bench-{uuid.uuid4().hex[:8]}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, turns, index = args.worker
        asyncio.run(worker(url, int(turns), int(index)))
        return
    folder = tempfile.mkdtemp(prefix="bench-contention-")
    verdicts = []
    header = f"{'scenario':<44} {'turns/s':>9} {'runs/turn':>10} {'re-runs':>8} {'merges':>7}"
    try:
        with redis_server(args.redis_url) as redis_url:
            for name, fresh in backends(redis_url, folder).items():
                print(f"\n{name}: {args.turns} concurrent turns, one process")
                print(header)
                for mode in ("counter", "members"):
                    one = asyncio.run(scenario(fresh(), mode, False, args.turns))
                    many = asyncio.run(scenario(fresh(), mode, True, args.turns))
                    print(one.row(f"{mode}: one conversation"))
                    print(many.row(f"{mode}: {args.turns} conversations (app bucket)"))
                    share = (one.turns / one.seconds) / (many.turns / many.seconds)
                    verdicts.append(
                        f"{name} {mode}: one conversation at {share:.0%} of many "
                        f"({'met' if share >= 0.5 else 'missed'} >= 50 %)"
                    )
                if name == "memory":
                    continue
                outcome, count = across_processes(fresh(), args.turns * 2)
                print(outcome.row(f"counter: {PROCESSES} processes, one conversation"))
                lost = outcome.turns - count
                per_turn = outcome.runs / outcome.turns
                verdicts.append(
                    f"{name} {PROCESSES} processes: {per_turn:.2f} runs per turn "
                    f"({'met' if per_turn <= 2 else 'missed'} <= 2), {lost} updates lost"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("\nEvery turn above succeeded and was applied exactly once (checked after each run).")
    for verdict in verdicts:
        print("  " + verdict)


if __name__ == "__main__":
    main()
