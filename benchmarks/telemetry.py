"""What telemetry costs a turn: off (this tree, `instrument()` never called) against no
telemetry code at all (an earlier commit, before it existed), and on (instrumented onto the
OpenTelemetry SDK: every span recorded and every metric aggregated, nothing exported).

Each row runs in a process of its own; the parent interleaves rounds (each row once per
round, the order reversed every other round) and reports each row's median turns/s and the
median of the rounds' own ratios to the row without telemetry code. The turn is
regression.py's memory turn: a counter in conversation state and a reply, timed in CPU
seconds of the worker (other load on the shared machine does not count).

Run: .venv/bin/python benchmarks/telemetry.py [--rev 6d3417a] [--rounds 15] [--round-seconds 0.3]
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

from _support import install_revision, round_order

BASELINE = "6d3417a"
"""The last commit without telemetry code (before issue 28)."""
ROWS = ("no telemetry code", "telemetry off", "telemetry on")
POOL = 200


async def _serve(row: str) -> None:
    """Worker: set up the bot (instrumented for the `on` row), then run a timed round per
    `go SECONDS` line on stdin, printing turns/s."""
    from agent_state import Activity, AgentApplication, TurnContext, TurnState, open_storage

    if row == "telemetry on":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider

        from agent_state.telemetry import instrument

        instrument(tracer_provider=TracerProvider(),
                   meter_provider=MeterProvider([InMemoryMetricReader()]))  # fmt: skip
    app = AgentApplication(open_storage("memory://"), app_name="bench")

    @app.message()
    async def on_message(ctx: TurnContext, state: TurnState) -> None:
        count = state.get("conversation.count", 0)
        state["conversation:count"] = count + 1
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
    turn = 0
    for line in sys.stdin:
        seconds = float(line.split()[1])
        done, started = 0, time.process_time()
        while time.process_time() - started < seconds:
            await app.process(activities[turn % POOL])
            turn += 1
            done += 1
        print(done / (time.process_time() - started), flush=True)


def _worker(row: str, path: Path | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if path is not None:  # the earlier version first on the path, ahead of this tree
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, __file__, "--worker", row], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default=BASELINE, help=f"commit without telemetry ({BASELINE})")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(_serve(args.worker))
        return
    with tempfile.TemporaryDirectory() as folder:
        earlier = install_revision(args.rev, Path(folder))
        workers = {row: _worker(row, earlier if row == ROWS[0] else None) for row in ROWS}
        rates: dict[str, list[float]] = {row: [] for row in ROWS}
        for number in range(args.rounds):
            for row in round_order(list(ROWS), number):
                worker = workers[row]
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(f"go {args.round_seconds}\n")
                worker.stdin.flush()
                rates[row].append(float(worker.stdout.readline()))
        for worker in workers.values():
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait(30)
    print(f"memory turn, one bucket changed; medians of {args.rounds} interleaved rounds of "
          f"{args.round_seconds} s (CPU time); ratio: median of per-round ratios\n")  # fmt: skip
    print(f"{'row':<20} {'turns/s':>9} {'vs no telemetry code':>21}")
    for row in ROWS:
        pairs = zip(rates[row], rates[ROWS[0]], strict=True)
        ratio = statistics.median(mine / theirs for mine, theirs in pairs)
        print(f"{row:<20} {statistics.median(rates[row]):>9,.0f} {ratio:>20.3f}x")


if __name__ == "__main__":
    main()
