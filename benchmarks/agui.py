"""Benchmark the AG-UI producer: one run changes one member of a 100 KB state 100 times.

Run from the repository root:  .venv/bin/python benchmarks/agui.py [--quick]
The agent sets one nested leaf (`items[i].detail.progress`) and awaits `run.sync()` after
each change; AGUIEndpoint (in process through httpx.ASGITransport, on MemoryStorage) streams
a STATE_DELTA per change. Compared with what a producer sending a STATE_SNAPSHOT per change
puts on the wire, and with `jsonpatch.make_patch` for the diff:

- bytes per change of the captured SSE frames; target: deltas under 5 % of snapshots;
- server time of the whole streamed run, ours and the same endpoint sending a snapshot per
  change (the agent emits it through AgentRun's private slots: the endpoint has no public
  way to), less a run with no change (the fixed cost: accept, load, commit);
- the per-change steps on the same two documents (the views before and after one change):
  our make_patch, jsonpatch.make_patch, the events around them; target: our diff at least
  10x faster than jsonpatch's.

Rounds are interleaved; the tables show medians. About 20 s (--quick: a few seconds).

Then a long thread and two tabs (`thread_costs`): a client that resends the whole history
every run (as AG-UI clients do), 200 runs with a 20 KB user message each and default
endpoint settings; the bytes the store is asked to write per run at run 10 and at run 200
(target: within 1.5x, a run costs what is new) and per 16-run window (one history page);
then two tabs posting runs of one thread at once, runs per second against one tab.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import jsonpatch
from ag_ui.core import StateDeltaEvent, StateSnapshotEvent
from ag_ui.encoder import EventEncoder
from pydantic import BaseModel, Field

from agent_state import open_storage
from agent_state.agui import AgentRun, AGUIEndpoint, StateMirror, iter_sse_events
from agent_state.backends import MemoryStorage, StoreItem
from agent_state.jsonpatch import apply_patch, make_patch

CHANGES = 100
STATE_BYTES = 100_000
ROUNDS, QUICK_ROUNDS = 7, 2
SAMPLE = 10  # pairs of views each round times every step on (jsonpatch takes ~25 ms a diff)
DELTA_TARGET = 0.05  # delta bytes under 5 % of snapshot bytes
DIFF_TARGET = 10.0  # our diff at least 10x faster than jsonpatch.make_patch
URL = "http://agent/"
ENCODER = EventEncoder()
View = dict[str, Any]
Pair = tuple[View, View]
Patch = list[dict[str, Any]]


class Owner(BaseModel):
    name: str
    email: str


class Detail(BaseModel):
    status: str = "open"
    progress: int = 0
    estimate: float = 1.5
    notes: list[str] = []


class Item(BaseModel):
    id: int
    title: str
    tags: list[str]
    owner: Owner
    detail: Detail


class Summary(BaseModel):
    title: str = "release board"
    revision: int = 1


def item(i: int) -> Item:
    return Item(
        id=i,
        title=f"task {i}: review the change set",
        tags=["backend", "review", f"sprint-{i % 7}"],
        owner=Owner(name=f"user {i % 40}", email=f"user{i % 40}@example.org"),
        detail=Detail(notes=[f"note {i}", "waiting on CI"]),
    )


ITEM_COUNT = STATE_BYTES // len(item(0).model_dump_json()) - 2  # about 100 KB of JSON in all
CHANGED = ITEM_COUNT // 2  # the item whose detail.progress the agent changes


class Board(BaseModel):
    """The exposed state: ~100 KB of items plus a summary."""

    summary: Summary = Field(default_factory=Summary)
    items: list[Item] = Field(default_factory=lambda: [item(i) for i in range(ITEM_COUNT)])


def view(board: Board) -> View:
    """What the endpoint sends: the exposed fields as JSON (ExposedState.view)."""
    return board.model_dump(mode="json", include=set(Board.model_fields))


async def delta_agent(run: AgentRun[Board]) -> None:
    """Ours: change the leaf, sync (a STATE_DELTA of what changed)."""
    changed = run.state.items[CHANGED].detail
    for k in range(1, CHANGES + 1):
        changed.progress = k
        await run.sync()


async def snapshot_agent(run: AgentRun[Board]) -> None:
    """A snapshot-per-change producer in the same endpoint: the same view as AgentRun.sync,
    then the whole view as a STATE_SNAPSHOT instead of a diff. AgentRun has no public way to
    emit an event of one's own, hence its private slots."""
    changed = run.state.items[CHANGED].detail
    for k in range(1, CHANGES + 1):
        changed.progress = k
        shown = run._exposed.view(run.state)
        run._sent = shown  # so the endpoint's closing sync finds nothing to send
        run._emit(StateSnapshotEvent(snapshot=shown))


async def idle_agent(run: AgentRun[Board]) -> None:
    """No change: the run's fixed cost (accept, load, first snapshot, commit, messages)."""


def endpoint(agent: Callable[[AgentRun[Board]], Any]) -> AGUIEndpoint[Board]:
    return AGUIEndpoint(agent, storage=MemoryStorage(), state=Board, authenticate=lambda _: "user")


async def streamed_run(client: httpx.AsyncClient) -> tuple[bytes, float]:
    """One run on a new thread: the raw SSE body and the seconds from POST to its end."""
    body = {
        "threadId": uuid.uuid4().hex,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "work the board"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    headers = {"accept": "text/event-stream"}
    start = time.perf_counter()
    async with client.stream("POST", URL, json=body, headers=headers) as reply:
        raw = await reply.aread()
    seconds = time.perf_counter() - start
    assert reply.status_code == 200, raw
    return raw, seconds


def frames(raw: bytes) -> list[tuple[str, int]]:
    """Each SSE frame's event type and its bytes on the wire (EventEncoder's framing)."""
    parts = [part for part in raw.split(b"\n\n") if part]
    assert all(part.startswith(b"data: ") for part in parts)
    return [(json.loads(part[6:])["type"], len(part) + 2) for part in parts]


def wire_bytes(delta_raw: bytes, snapshot_raw: bytes, theirs: dict[int, Patch]) -> dict[str, float]:
    """Bytes per change: our deltas, the snapshots a snapshot-per-change producer sends (each
    encoded from the state a client holds after the delta) and jsonpatch's deltas (`theirs`:
    its patch for change k, on the changes checked)."""
    deltas = [size for kind, size in frames(delta_raw) if kind == "STATE_DELTA"]
    assert len(deltas) == CHANGES
    mirror, snapshots = StateMirror(), 0
    for event in iter_sse_events([delta_raw]):
        mirror.apply(event)
        if event["type"] == "STATE_DELTA":
            snapshots += len(ENCODER.encode(StateSnapshotEvent(snapshot=mirror.state)).encode())
    expected = Board()
    expected.items[CHANGED].detail.progress = CHANGES
    assert not mirror.needs_resync and mirror.state == view(expected)
    # the snapshot-per-change run really sent those bytes (its first snapshot is the initial one)
    sent = [size for kind, size in frames(snapshot_raw) if kind == "STATE_SNAPSHOT"][1:]
    assert len(sent) == CHANGES and sum(sent) == snapshots, (sum(sent), snapshots)
    their_bytes = [
        len(ENCODER.encode(StateDeltaEvent.model_validate({"delta": p})).encode())
        for p in theirs.values()
    ]
    return {
        "STATE_DELTA, ours": sum(deltas) / CHANGES,
        "STATE_DELTA, jsonpatch's diff": statistics.mean(their_bytes),
        "STATE_SNAPSHOT per change": snapshots / CHANGES,
    }


def views_of_a_run() -> list[View]:
    """The views the endpoint diffs: before the first change and after each one."""
    board = Board()
    views = [view(board)]
    for k in range(1, CHANGES + 1):
        board.items[CHANGED].detail.progress = k
        views.append(view(board))
    return views


def check_diffs(pairs: list[Pair], every: int) -> dict[int, Patch]:
    """Both diffs are correct (ours on every pair, jsonpatch's, slow, on every `every`th) and
    ours is the one-operation patch; jsonpatch's patches by change."""
    theirs: dict[int, Patch] = {}
    for k, (before, after) in enumerate(pairs, 1):
        ours = make_patch(before, after)
        assert len(ours) == 1 and apply_patch(before, ours) == after
        if k % every == 0:
            theirs[k] = jsonpatch.make_patch(before, after).patch
            assert jsonpatch.apply_patch(before, theirs[k]) == after
    return theirs


def per_change_steps(pairs: list[Pair]) -> dict[str, Callable[[int], object]]:
    """Each per-change step for change k (0-based), all on the same pair of views."""
    ours = [make_patch(before, after) for before, after in pairs]
    board = Board()
    return {
        "diff: our make_patch": lambda k: make_patch(*pairs[k]),
        "diff: jsonpatch.make_patch": lambda k: jsonpatch.make_patch(*pairs[k]),
        # what AgentRun.sync and the endpoint do with the patch
        "STATE_DELTA event + encode": lambda k: ENCODER.encode(
            StateDeltaEvent.model_validate({"delta": ours[k]})
        ),
        "STATE_SNAPSHOT event + encode": lambda k: ENCODER.encode(
            StateSnapshotEvent(snapshot=pairs[k][1])
        ),
        "view: model_dump (both pay it)": lambda k: view(board),
    }


def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def per_change(seconds: float) -> float:
    """µs per change of a run's seconds."""
    return seconds / CHANGES * 1e6


async def measure(rounds: int, every: int) -> None:
    views = views_of_a_run()
    pairs = list(zip(views, views[1:], strict=False))
    theirs = check_diffs(pairs, every)
    steps = per_change_steps(pairs)
    apps = {"deltas (ours)": delta_agent, "snapshot per change": snapshot_agent,
            "no change (fixed cost)": idle_agent}  # fmt: skip
    clients = {
        name: httpx.AsyncClient(transport=httpx.ASGITransport(endpoint(agent)))
        for name, agent in apps.items()
    }
    await streamed_run(clients["no change (fixed cost)"])  # warm-up: the endpoint's code paths
    gc.collect()
    gc.freeze()  # the views and models built so far stay out of the collector's walks
    raws: dict[str, bytes] = {}
    runs: dict[str, list[float]] = {name: [] for name in clients}
    costs: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name, client in clients.items():
            raws[name], seconds = await streamed_run(client)
            runs[name].append(seconds)
        for k in range(r * SAMPLE, (r + 1) * SAMPLE):  # another slice of the changes each round
            order = list(steps)[k % len(steps) :] + list(steps)[: k % len(steps)]
            for name in order:  # each step first in turn
                costs[name].append(timed(partial(steps[name], k % CHANGES)))
    for client in clients.values():
        await client.aclose()
    wire = wire_bytes(raws["deltas (ours)"], raws["snapshot per change"], theirs)
    run = {name: statistics.median(values) for name, values in runs.items()}
    cost = {name: statistics.median(values) * 1e6 for name, values in costs.items()}
    report(wire, raws, run, cost, rounds, len(theirs))


def report(
    wire: dict[str, float],
    raws: dict[str, bytes],
    run: dict[str, float],
    cost: dict[str, float],
    rounds: int,
    checked: int,
) -> None:
    state = len(ENCODER.encode(StateSnapshotEvent(snapshot=view(Board()))))
    print(f"One AG-UI run: {CHANGES} changes of one nested leaf of a {state / 1e3:.0f} KB state")
    print(f"({ITEM_COUNT} items), run.sync() after each; {rounds} interleaved rounds, medians\n")

    snapshot = wire["STATE_SNAPSHOT per change"]
    print(f"{'SSE bytes on the wire per change':<36}{'bytes':>10}{'of snapshot':>14}")
    for name, size in wire.items():
        print(f"{name:<36}{size:>10,.0f}{size / snapshot:>14.2%}")
    print(f"(jsonpatch's diff: on {checked} of the {CHANGES} changes, same encoder)")
    for name in ("deltas (ours)", "snapshot per change"):
        print(f"whole stream, {name + ':':<21}{len(raws[name]) / 1e3:>9,.0f} KB (first snapshot "
              "included)")  # fmt: skip

    fixed = run["no change (fixed cost)"]
    ours, snapshots = run["deltas (ours)"], run["snapshot per change"]
    print("\nserver time, the whole streamed run (httpx.ASGITransport, MemoryStorage)")
    print(f"{'run':<36}{'ms/run':>10}{'µs/change':>12}{'less fixed':>12}")
    for name, seconds in run.items():
        marginal = "" if seconds is fixed else f"{per_change(seconds - fixed):>12,.0f}"
        print(f"{name:<36}{seconds * 1e3:>10,.1f}{per_change(seconds):>12,.0f}{marginal}")
    print(f"(µs/change: the run / {CHANGES}; less fixed: less the run with no change.) "
          f"Snapshots take {snapshots / ours:.2f}x")  # fmt: skip
    print(f"our time per run, {(snapshots - fixed) / (ours - fixed):.2f}x per change.")

    diff = cost["diff: our make_patch"]
    print("\nper-change steps on the same two views (before and after a change), each timed on")
    print(f"{SAMPLE} changes a round (another slice each round), interleaved call by call")
    print(f"{'step':<36}{'µs/change':>10}{'vs our diff':>14}")
    for name, micros in cost.items():
        print(f"{name:<36}{micros:>10,.1f}{micros / diff:>13.1f}x")

    print(f"our diff is {diff / per_change(ours):.1%} of the whole run's time per change\n")

    ratio = wire["STATE_DELTA, ours"] / snapshot
    speedup = cost["diff: jsonpatch.make_patch"] / diff
    print(f"target: delta bytes < {DELTA_TARGET:.0%} of snapshot bytes: {ratio:.2%}, "
          f"{'MET' if ratio < DELTA_TARGET else 'NOT MET'}")  # fmt: skip
    print(f"target: diff >= {DIFF_TARGET:.0f}x faster than jsonpatch.make_patch: {speedup:.1f}x, "
          f"{'MET' if speedup >= DIFF_TARGET else 'NOT MET'}")  # fmt: skip


THREAD_RUNS, MESSAGE_BYTES, GROWTH_TARGET = 200, 20_000, 1.5
TAB_PAIRS = 30


class WrittenBytes(MemoryStorage):
    """MemoryStorage adding up the JSON bytes of every document it is asked to write."""

    def __init__(self) -> None:
        super().__init__()
        self.written = 0

    async def write(self, changes: Any, **options: Any) -> dict[str, str]:
        items: dict[str, StoreItem] = dict(changes)
        self.written += sum(len(json.dumps(item.value)) for item in items.values())
        return await super().write(items, **options)


class Chat(BaseModel):
    turns: int = 0


async def _reply(run: AgentRun[Chat]) -> None:
    run.state.turns += 1
    await run.say(f"answer {run.state.turns}")


def _chat(storage: Any) -> AGUIEndpoint[Chat]:
    return AGUIEndpoint(_reply, storage=storage, state=Chat, authenticate=lambda _: "ada")


async def _post(client: httpx.AsyncClient, thread: str, run: str, messages: list[Any]) -> list[Any]:
    """One run; the messages of its MESSAGES_SNAPSHOT (the client's history after it)."""
    body = {"threadId": thread, "runId": run, "state": {}, "messages": messages, "tools": [],
            "context": [], "forwardedProps": {}}  # fmt: skip
    response = await client.post(URL, content=json.dumps(body))
    if response.status_code != 200:
        raise SystemExit(f"run {run} refused: HTTP {response.status_code} {response.text[:200]}")
    events = list(iter_sse_events([response.content]))
    if events[-1]["type"] != "RUN_FINISHED":
        raise SystemExit(f"run {run} did not finish: {events[-1]}")
    return next(e["messages"] for e in events if e["type"] == "MESSAGES_SNAPSHOT")


async def thread_costs(runs: int) -> None:
    storage = WrittenBytes()
    per_run: list[int] = []
    transport = httpx.ASGITransport(app=_chat(storage))
    async with httpx.AsyncClient(transport=transport, timeout=120) as client:
        history: list[Any] = []
        for number in range(1, runs + 1):
            asked = {"id": f"q{number}", "role": "user", "content": "x" * MESSAGE_BYTES}
            before = storage.written
            history = await _post(client, "long", f"r{number}", [*history, asked])
            per_run.append(storage.written - before)
    print(f"\nA {runs}-run thread, a {MESSAGE_BYTES // 1000} KB user message a run, the whole "
          "history resent every run, default settings")  # fmt: skip
    print(f"{'bytes written':<36}{'run 10':>12}{f'run {runs}':>12}{'ratio':>8}")
    at_10, at_end = per_run[9], per_run[-1]
    print(f"{'that run':<36}{at_10:>12,}{at_end:>12,}{at_end / at_10:>8.2f}")
    early, late = per_run[2:18], per_run[-16:]
    mean_early, mean_late = statistics.mean(early), statistics.mean(late)
    print(f"{'mean of 16 runs around it':<36}{mean_early:>12,.0f}{mean_late:>12,.0f}"
          f"{mean_late / mean_early:>8.2f}")  # fmt: skip
    print(f"target: run {runs} within {GROWTH_TARGET}x of run 10: {at_end / at_10:.2f}x, "
          f"{'MET' if at_end <= GROWTH_TARGET * at_10 else 'NOT MET'}")  # fmt: skip


def _hello(ident: str) -> dict[str, str]:
    return {"id": ident, "role": "user", "content": "hi"}


async def _tabs(storage: Any, tabs: int) -> float:
    """Runs per second of `tabs` clients posting runs of one thread at once."""
    transport = httpx.ASGITransport(app=_chat(storage))
    async with httpx.AsyncClient(transport=transport, timeout=120) as client:
        started = time.perf_counter()
        for pair in range(TAB_PAIRS):
            posts = [
                _post(client, "tabs", f"p{pair}-{tab}", [_hello(f"m{pair}-{tab}")])
                for tab in range(tabs)
            ]
            await asyncio.gather(*posts)
        return TAB_PAIRS * tabs / (time.perf_counter() - started)


async def tab_throughput(folder: str) -> None:
    print(f"\nTwo tabs on one thread: {TAB_PAIRS} rounds of runs posted at once, all finished")
    print(f"{'store':<12}{'one tab, runs/s':>18}{'two tabs, runs/s':>18}")
    stores: dict[str, Callable[[], Any]] = {
        "memory": MemoryStorage,
        "file": lambda: open_storage(f"file://{folder}/{uuid.uuid4().hex}"),
    }
    for name, make in stores.items():
        one, two = await _tabs(make(), 1), await _tabs(make(), 2)
        print(f"{name:<12}{one:>18,.0f}{two:>18,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_ROUNDS} rounds, jsonpatch checked on 10 changes",
    )
    parser.add_argument("--thread-only", action="store_true", help="only the long thread and tabs")
    options = parser.parse_args()
    quick = options.quick
    if not options.thread_only:
        asyncio.run(measure(QUICK_ROUNDS if quick else ROUNDS, every=10 if quick else 1))
    asyncio.run(thread_costs(THREAD_RUNS))
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(tab_throughput(folder))


if __name__ == "__main__":
    main()
