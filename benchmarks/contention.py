"""Turns under contention: one conversation vs many, in one process and across processes.

Each scenario runs TURNS concurrent `AgentApplication` turns (activities with fresh ids, as
real channels send them) and checks that every one of them was applied (the counters or
the members end exactly right). It prints turns/s, runs per turn (`ctx.attempt`), re-runs
and merges (save writes beyond one per run):

- one conversation: all TURNS turns in conversation c0 (each its own user), so the
  per-conversation queue orders them;
- baseline, TURNS independent conversations: turn i in conversation c{i} with user u{i},
  touching only its own buckets (nothing shared, so nothing to coordinate);

each as "counter" (the conversation's `count` += 1) and "members" (each turn sets its own
member of the conversation bucket); and, shown for information, "counter" in one
conversation from one user (a burst of one user's messages: each queued turn reads the same
buckets, so it starts from what the turn before it committed, without a storage read).
Each side's timed batch follows an untimed one on the same conversations (documents exist,
caches are warm). Rounds are interleaved (fresh
stores each round, the order reversed every other round); turns/s is the median of the
rounds, the share the median of the rounds' own one/independent ratios.

Then PROCESSES OS processes run turns on one conversation at once (file and Redis only).
Targets (issue 23): one conversation at >= 50 % of the independent conversations'
throughput, on memory, file and Redis; every turn succeeds; across processes <= 2 runs per
turn on average.

Run: .venv/bin/python benchmarks/contention.py [--turns 50] [--rounds 3] [--redis-url URL]
Without --redis-url (or $AGENT_STATE_REDIS_URL) it starts a private redis-server on a free
port and stops it by its PID at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _support import redis_server

from agent_state import AgentApplication, TurnContext, TurnState, conversation_key, open_storage
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
    """A message from `user` in `conversation`, with a fresh id."""
    return {"type": "message", "id": uuid.uuid4().hex, "channelId": "bench", "text": "hi",
            "from": {"id": user}, "conversation": {"id": conversation}}  # fmt: skip


def application(storage: Storage, runs: list[int], mode: str) -> AgentApplication:
    """`mode` counter: the conversation's count += 1; members: its own member := 1."""
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def turn(ctx: TurnContext, state: TurnState) -> None:
        runs[0] += 1
        user = ctx.activity.from_property.id if ctx.activity.from_property else "?"
        if mode == "counter":
            state["conversation:count"] = state.get("conversation.count", 0) + 1
        else:
            state.set(f"conversation.members.{user}", 1)

    return app


async def scenario(
    url: str, mode: str, spread: bool, turns: int, one_user: bool = False
) -> Outcome:
    """`turns` concurrent turns, in one conversation or (`spread`) each in its own, timed
    after an untimed batch of the same conversations (documents exist, caches are warm), each
    from its own user or all from one (`one_user`); checks that every turn of both was
    applied exactly once."""
    storage = open_storage(url)
    writes = counting(storage)
    runs = [0]
    app = application(storage, runs, mode)
    conversations = [f"c{i}" if spread else "c0" for i in range(turns)]

    async def batch(users: str) -> None:
        await asyncio.gather(
            *(
                app.process(message(users if one_user else f"{users}{i}", c))
                for i, c in enumerate(conversations)
            )
        )

    await batch("w")
    runs[0] = writes[0] = 0
    start = time.perf_counter()
    await batch("u")
    seconds = time.perf_counter() - start
    keys = sorted({conversation_key("bench", conversation) for conversation in conversations})
    found = await storage.read(keys)
    await storage.close()
    each = 2 * turns // len(keys)  # turns per conversation, both batches
    for key in keys:
        value = found[key].value if key in found else {}
        applied = value.get("count") if mode == "counter" else len(value.get("members", {}))
        if applied != each:
            raise SystemExit(f"LOST UPDATES in {mode}/{'spread' if spread else 'one'}: {value}")
    return Outcome(turns, seconds, runs[0], writes[0])


async def worker(url: str, turns: int, index: int) -> None:
    """One of the processes: `turns` turns on conversation c0; prints runs and writes."""
    storage = open_storage(url)
    writes = counting(storage)
    runs = [0]
    app = application(storage, runs, "counter")
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
    key = conversation_key("bench", "c0")
    value = (await storage.read([key]))[key].value
    await storage.close()
    return int(value["count"])


def backends(redis_url: str, folder: str) -> dict[str, Callable[[], str]]:
    """Each backend as a factory of a fresh store's URL (a new folder or namespace per run)."""
    return {
        "memory": lambda: "memory://",
        "file": lambda: f"file://{tempfile.mkdtemp(dir=folder)}",
        "redis": lambda: f"{redis_url}?namespace=bench-{uuid.uuid4().hex[:8]}",
    }


@dataclass
class Pair:
    """One backend and mode: the one-conversation and independent outcomes of every round
    (and, for the counter, one conversation of one user's turns)."""

    one: list[Outcome]
    independent: list[Outcome]
    one_user: list[Outcome]

    def share(self, one: list[Outcome] | None = None) -> float:
        """The median over rounds of one conversation's turns/s (or `one`'s) over the
        independent ones'."""
        pairs = zip(self.one if one is None else one, self.independent, strict=True)
        return statistics.median(a.turns / a.seconds / (b.turns / b.seconds) for a, b in pairs)


def measure_pair(fresh: Callable[[], str], mode: str, turns: int, rounds: int) -> Pair:
    """Both sides for `rounds` rounds, each on a fresh store, the order reversed every other
    round."""
    pair = Pair([], [], [])
    for number in range(rounds):
        sides = [(False, False, pair.one), (True, False, pair.independent)]
        if mode == "counter":
            sides.append((False, True, pair.one_user))
        for spread, one_user, outcomes in sides if number % 2 == 0 else sides[::-1]:
            outcomes.append(asyncio.run(scenario(fresh(), mode, spread, turns, one_user)))
    return pair


def combined(outcomes: list[Outcome]) -> Outcome:
    """The rounds as one row: the median round's time, every round's runs and writes."""
    seconds = statistics.median(outcome.seconds for outcome in outcomes)
    turns = outcomes[0].turns
    runs = sum(outcome.runs for outcome in outcomes)
    writes = sum(outcome.writes for outcome in outcomes)
    return Outcome(turns, seconds, round(runs / len(outcomes)), round(writes / len(outcomes)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis-url", default=os.environ.get("AGENT_STATE_REDIS_URL"))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, turns, index = args.worker
        asyncio.run(worker(url, int(turns), int(index)))
        return 0
    folder = tempfile.mkdtemp(prefix="bench-contention-")
    verdicts = []
    all_met = True
    header = f"{'scenario':<44} {'turns/s':>9} {'runs/turn':>10} {'re-runs':>8} {'merges':>7}"
    print(
        f"{args.turns} concurrent turns (fresh activity ids) in one conversation vs the baseline,"
        f" {args.turns} independent conversations (each its own conversation, user and"
        f" buckets); medians of {args.rounds} interleaved rounds, per-round runs/re-runs/merges"
    )
    try:
        with redis_server(args.redis_url) as redis_url:
            for name, fresh in backends(redis_url, folder).items():
                print(f"\n{name}: {args.turns} concurrent turns, one process")
                print(header)
                for mode in ("counter", "members"):
                    pair = measure_pair(fresh, mode, args.turns, args.rounds)
                    print(combined(pair.one).row(f"{mode}: one conversation"))
                    print(
                        combined(pair.independent).row(
                            f"{mode}: {args.turns} independent conversations"
                        )
                    )
                    if pair.one_user:
                        print(combined(pair.one_user).row(f"{mode}: one conversation, one user"))
                        verdicts.append(
                            f"{name} {mode}: one conversation of one user at"
                            f" {pair.share(pair.one_user):.0%} of {args.turns} independent"
                            " conversations (for information)"
                        )
                    share = pair.share()
                    met = share >= 0.5
                    all_met &= met
                    verdicts.append(
                        f"{name} {mode}: one conversation at {share:.0%} of {args.turns}"
                        f" independent conversations (>= 50 %: {'met' if met else 'NOT met'})"
                    )
                if name == "memory":
                    continue
                outcome, count = across_processes(fresh(), args.turns)
                print(outcome.row(f"counter: {PROCESSES} processes, one conversation"))
                lost = outcome.turns - count
                per_turn = outcome.runs / outcome.turns
                met = per_turn <= 2 and lost == 0
                all_met &= met
                verdicts.append(
                    f"{name} {PROCESSES} processes: {per_turn:.2f} runs per turn, {lost} updates"
                    f" lost (<= 2, none lost: {'met' if met else 'NOT met'})"
                )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("\nEvery turn above succeeded and was applied exactly once (checked after each run).")
    for verdict in verdicts:
        print("  " + verdict)
    return 0 if all_met else 1


if __name__ == "__main__":
    sys.exit(main())
