"""agent-state at an earlier commit vs this tree: the same uncontended turns, side by side.

Each version runs in a process of its own: the earlier one installed from `git archive` of
the revision into a temporary folder, this tree as installed. The parent interleaves
rounds (each version once per round, the order alternating) and reports each version's
median turns/s and the median of the rounds' own ratios (this tree over the earlier one,
each pair run back to back, so a slow spell of the shared machine hits both). The turns
are `turns.py`'s (a counter in conversation state, a reply, activities without ids), plus
one that changes two buckets (user and conversation), on MemoryStorage and on FileStorage.
Memory turns never wait, so they are timed in CPU seconds of their process (other load on
a shared machine does not count); file turns wait for the disk, so in wall-clock seconds.

Both versions do the same work, but not under the same guarantees where a turn writes two
buckets on a store that writes key by key: there this tree commits them all-or-nothing
(backends/_commit.py) and the earlier one wrote them one after the other. Those rows show
what the guarantee costs, not a speed-up or a slow-down of the same thing.

Run: .venv/bin/python benchmarks/regression.py [--rev 86dd04a] [--rounds 9] [--round-seconds 0.3]
     [--only memory]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _support import install_revision

BASELINE = "86dd04a"
"""The last commit before the turn-transactions work (issue 9)."""
SCENARIOS = {
    "memory, one bucket changed": ("memory", 1),
    "memory, unchanged": ("memory", 0),
    "file, one bucket changed": ("file", 1),
    "file, unchanged": ("file", 0),
    "file, two buckets changed": ("file", 2),
}
POOL = 200


async def _serve(backend: str, buckets: int) -> None:
    """Worker: set up one scenario, then run a timed round per `go SECONDS` line on stdin."""
    from agent_state import Activity, AgentApplication, TurnContext, TurnState, open_storage

    folder = tempfile.mkdtemp(prefix="agent-state-regression-")
    storage = open_storage("memory://" if backend == "memory" else f"file://{folder}")
    app = AgentApplication(storage, app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        if buckets:
            state["conversation:count"] = count + 1
        if buckets == 2:
            state["user:turns"] = state.get("user.turns", 0) + 1
        await ctx.send(f"count {count}")

    activities = [
        Activity(
            channel_id="bench",
            from_={"id": f"u{i}"},
            recipient={"id": "bot"},
            conversation={"id": f"c{i}"},
            text="hi",
        )  # fmt: skip
        for i in range(POOL)
    ]
    for activity in activities:  # every document exists before timing
        await app.process(activity)
    clock = time.process_time if backend == "memory" else time.perf_counter
    turn = 0
    for line in sys.stdin:
        seconds = float(line.split()[1])
        done, started = 0, clock()
        while clock() - started < seconds:
            await app.process(activities[turn % POOL])
            turn += 1
            done += 1
        print(done / (clock() - started), flush=True)


def _worker(scenario: str, path: Path | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if path is not None:  # the earlier version first on the path, ahead of this tree
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    backend, buckets = SCENARIOS[scenario]
    command = [sys.executable, __file__, "--worker", backend, str(buckets)]
    return subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


def _version(path: Path | None) -> str:
    env = dict(os.environ, PYTHONPATH=str(path)) if path else None
    code = "import agent_state, os; print(os.path.dirname(agent_state.__file__))"
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default=BASELINE, help=f"earlier commit (default {BASELINE})")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--only", default="", help="run the turns whose name contains this")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_serve(args.worker[0], int(args.worker[1])))
        return
    with tempfile.TemporaryDirectory() as folder:
        earlier = install_revision(args.rev, Path(folder))
        if _version(earlier) == _version(None):
            raise SystemExit("the earlier version does not shadow this tree's install")
        print(f"agent-state at {args.rev} vs this tree; medians of {args.rounds} interleaved")
        print(f"rounds of {args.round_seconds} s; turns/s; ratio: median of per-round ratios\n")
        print(f"{'turn':<28} {args.rev:>10} {'this tree':>10} {'ratio':>7}")
        for scenario in [name for name in SCENARIOS if args.only in name]:
            workers = {"old": _worker(scenario, earlier), "new": _worker(scenario, None)}
            rates: dict[str, list[float]] = {"old": [], "new": []}
            for number in range(args.rounds):
                order = ["old", "new"] if number % 2 == 0 else ["new", "old"]
                for name in order:
                    worker = workers[name]
                    assert worker.stdin is not None and worker.stdout is not None
                    worker.stdin.write(f"go {args.round_seconds}\n")
                    worker.stdin.flush()
                    rates[name].append(float(worker.stdout.readline()))
            for worker in workers.values():
                assert worker.stdin is not None
                worker.stdin.close()
                worker.wait(30)
            old, new = (statistics.median(rates[name]) for name in ("old", "new"))
            pairs = zip(rates["new"], rates["old"], strict=True)
            ratio = statistics.median(mine / theirs for mine, theirs in pairs)
            print(f"{scenario:<28} {old:>10,.0f} {new:>10,.0f} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
