"""Reading an AG-UI thread (`GET /threads/{id}`: state, last page of messages, runs) at 10,
60 and 10,000 messages, and listing a user's threads (`GET /threads?limit=10`) for a user
with 10 and one with 1,000 threads, on memory and Redis, through `AGUIEndpoint` over httpx's
ASGI transport. Each thread has one run; the rest of its messages are appended to its
history. Rounds interleave the threads (the users); each ratio is the median of the rounds'
own ratios.

Targets (issue 29): the last page of a 10,000-message thread costs within 1.3x of a
10-message thread's; a page of the list of a user with 1,000 threads within 1.3x of one with
10. The 60-message row has a full last page (50 messages), as the long thread has, so the
two differ only in the history's length. The list's last row is a page past the user's 100
newest threads (its older index pages are read too), for information.

Run: .venv/bin/python benchmarks/threads.py [--rounds 7] [--reads 40] [--threads 1000]
Redis: $AGENT_STATE_REDIS_URL (skipped, and said so, when unset).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import httpx
from pydantic import BaseModel
from starlette.requests import Request

from agent_state import TurnIds, open_storage, open_turn
from agent_state.agui import AgentRun, AGUIEndpoint
from agent_state.backends import MemoryStorage, Storage

APP = "bench"
SIZES = (10, 60, 10_000)
TARGET = 1.3


class Plan(BaseModel):
    steps: list[str] = []


async def agent(run: AgentRun[Plan]) -> None:
    run.state.steps.append("step")
    await run.say("done")


def user(request: Request) -> str:
    return request.headers.get("x-user", "ada")


async def seed(storage: Storage, client: httpx.AsyncClient, thread: str, messages: int) -> None:
    """A thread of `messages` messages: one run (two messages), the rest appended."""
    body = {"threadId": thread, "runId": f"{thread}-r1", "state": {}, "tools": [],
            "context": [], "forwardedProps": {},
            "messages": [{"id": f"{thread}-u", "role": "user", "content": "hi"}]}  # fmt: skip
    (await client.post("/", json=body, headers={"accept": "text/event-stream"})).raise_for_status()
    async with open_turn(storage, TurnIds("agui", "ada", thread, APP)) as turn:
        await turn.history.append(
            *({"id": f"{thread}-m{i}", "role": "user", "content": f"m{i}"}
              for i in range(messages - 2))
        )  # fmt: skip


async def read_time(client: httpx.AsyncClient, thread: str, reads: int) -> float:
    """Seconds per `GET /threads/{thread}`, over `reads` requests."""
    started = time.perf_counter()
    for _ in range(reads):
        reply = await client.get(f"/threads/{thread}")
        assert reply.status_code == 200
    return (time.perf_counter() - started) / reads


async def table(name: str, storage: Storage, rounds: int, reads: int) -> bool:
    endpoint = AGUIEndpoint(agent, storage=storage, state=Plan, authenticate=user, app_name=APP)
    transport = httpx.ASGITransport(app=endpoint)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        threads = {size: f"t{size}-{os.getpid()}-{time.time_ns()}" for size in SIZES}
        for size, thread in threads.items():
            await seed(storage, client, thread, size)
        times: dict[int, list[float]] = {size: [] for size in SIZES}
        for _ in range(rounds):
            for size, thread in threads.items():
                times[size].append(await read_time(client, thread, reads))
    short = times[SIZES[0]]
    print(f"\n{name}: GET /threads/{{id}}, {reads} reads x {rounds} interleaved rounds")
    print(f"{'messages':>9}{'us/read':>10}{'vs 10':>8}")
    for size in SIZES:
        ratio = statistics.median(t / s for t, s in zip(times[size], short, strict=True))
        print(f"{size:>9,}{statistics.median(times[size]) * 1e6:>10,.0f}{ratio:>7.2f}x")
    longest = statistics.median(t / s for t, s in zip(times[SIZES[-1]], short, strict=True))
    met = longest <= TARGET
    verdict = "met" if met else "NOT met"
    print(f"Target: 10,000 messages <= {TARGET}x 10 messages: {longest:.2f}x {verdict}")
    return met


async def list_time(client: httpx.AsyncClient, who: str, cursor: str | None, reads: int) -> float:
    """Seconds per `GET /threads?limit=10` (after `cursor`) as user `who`, over `reads`."""
    path = "/threads?limit=10" + (f"&cursor={cursor}" if cursor else "")
    started = time.perf_counter()
    for _ in range(reads):
        reply = await client.get(path, headers={"x-user": who})
        assert reply.status_code == 200 and len(reply.json()["threads"]) == 10
    return (time.perf_counter() - started) / reads


async def list_table(name: str, storage: Storage, rounds: int, reads: int, many: int) -> bool:
    endpoint = AGUIEndpoint(agent, storage=storage, state=Plan, authenticate=user, app_name=APP)
    transport = httpx.ASGITransport(app=endpoint)
    tag = f"{os.getpid()}-{time.time_ns()}"
    users = {10: f"few-{tag}", many: f"many-{tag}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for count, who in users.items():
            for number in range(count):
                message = {"id": f"u{number}", "role": "user", "content": "hi"}
                body = {"threadId": f"{who}-{number}", "runId": f"r{number}", "state": {},
                        "tools": [], "context": [], "forwardedProps": {},
                        "messages": [message]}  # fmt: skip
                reply = await client.post("/", json=body, headers={"x-user": who})
                reply.raise_for_status()
        deep = None  # a cursor past the many-thread user's newest 150: older index pages
        for _ in range(2):
            page = await client.get(f"/threads?limit=75{f'&cursor={deep}' if deep else ''}",
                                    headers={"x-user": users[many]})  # fmt: skip
            deep = page.json()["next"]
        cases = {"10 threads": (users[10], None), f"{many:,} threads": (users[many], None),
                 f"{many:,}, past 150": (users[many], deep)}  # fmt: skip
        times: dict[str, list[float]] = {case: [] for case in cases}
        for _ in range(rounds):
            for case, (who, cursor) in cases.items():
                times[case].append(await list_time(client, who, cursor, reads))
    short = times["10 threads"]
    print(f"\n{name}: GET /threads?limit=10, {reads} lists x {rounds} interleaved rounds")
    print(f"{'user with':>18}{'us/list':>10}{'vs 10':>8}")
    ratios = {}
    for case in cases:
        ratios[case] = statistics.median(t / s for t, s in zip(times[case], short, strict=True))
        print(f"{case:>18}{statistics.median(times[case]) * 1e6:>10,.0f}{ratios[case]:>7.2f}x")
    longest = ratios[f"{many:,} threads"]
    met = longest <= TARGET
    verdict = "met" if met else "NOT met"
    print(f"Target: a page for {many:,} threads <= {TARGET}x for 10: {longest:.2f}x {verdict}")
    return met


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reads", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1_000)
    args = parser.parse_args()
    print("Reading an AG-UI thread: state, last page, runs; medians of per-round ratios")
    results = [await table("memory", MemoryStorage(), args.rounds, args.reads)]
    results.append(
        await list_table("memory", MemoryStorage(), args.rounds, args.reads, args.threads)
    )
    url = os.environ.get("AGENT_STATE_REDIS_URL")
    if url:
        storage = open_storage(url)
        async with storage:
            results.append(await table("Redis", storage, args.rounds, args.reads))
            results.append(
                await list_table("Redis", storage, args.rounds, args.reads, args.threads)
            )
    else:
        print("\nRedis: skipped (AGENT_STATE_REDIS_URL is not set)")
    raise SystemExit(0 if all(results) else 1)


if __name__ == "__main__":
    asyncio.run(main())
