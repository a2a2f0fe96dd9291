"""Claimed routes: one activity delivered by four processes at once runs its handler once.

A `rerun=False` route alone does not promise that: each process that reads the activity
before another saved it runs the handler (the state is still applied once). A claimed route
first creates the activity's record as a claim (create-only, with a lease), so only one
process runs the handler; the others are refused with `ActivityClaimedError`, or get the
first replies once the claimer saved. A claimer that dies leaves its claim until the lease
ends; then a redelivery runs the route again.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_state import (
    ActivityClaimedError,
    ActivityConflictError,
    AgentApplication,
    TurnContext,
    TurnState,
    open_storage,
)
from agent_state.backends import MemoryStorage
from tests.state.claim.worker import ACTIVITY, KILLED, LEASE, application, deliver
from tests.stores import STORES

PROCESSES = 4
WORKER = "tests.state.claim.worker"


@pytest.fixture
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    yield STORES[request.param](str(tmp_path))


def run_workers(url: str, effects: Path, mode: str, count: int) -> list[tuple[int, Any]]:
    """Start `count` workers, let them deliver the activity at once; (status, outcome) each."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", WORKER, url, str(effects), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for worker in workers:  # every process has its store open and its app built
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    results = []
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        lines = out.splitlines()
        results.append((worker.returncode, orjson.loads(lines[-1]) if lines else None))
    return results


async def paid(url: str) -> int:
    storage = open_storage(url)
    try:
        found = await storage.read(["shop/c/conversations/k", "c/conversations/k"])
    finally:
        await storage.close()
    return sum(item.value.get("paid", 0) for item in found.values())


def runs(effects: Path) -> int:
    return len(effects.read_text().splitlines()) if effects.exists() else 0


@pytest.mark.parametrize("url", ["file", "redis"], indirect=True)
async def test_a_claimed_route_runs_once_for_an_activity_from_four_processes(
    url: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    results = run_workers(url, effects, "claim", PROCESSES)
    assert all(status == 0 for status, _ in results)
    outcomes = [outcome for _, outcome in results]
    assert runs(effects) == 1  # the payment was made once
    assert await paid(url) == 10  # and recorded once
    for outcome in outcomes:  # the others were refused, or got the first replies
        assert outcome in ({"replies": ["paid"]}, {"error": "ActivityClaimedError"})
    assert outcomes.count({"replies": ["paid"]}) >= 1


@pytest.mark.parametrize("url", ["file", "redis"], indirect=True)
async def test_rerun_false_alone_applies_state_once(url: str, tmp_path: Path) -> None:
    """What `rerun=False` promises across processes: the state, not the handler, once."""
    effects = tmp_path / "effects"
    results = run_workers(url, effects, "rerun-false", PROCESSES)
    assert all(status == 0 for status, _ in results)
    assert 1 <= runs(effects) <= PROCESSES
    assert await paid(url) == 10
    print(f"rerun=False: the handler ran {runs(effects)} times in {PROCESSES} processes")


@pytest.mark.parametrize("url", ["file", "redis"], indirect=True)
async def test_a_dead_claimers_activity_runs_again_once_its_lease_ends(
    url: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects"
    [(status, _)] = run_workers(url, effects, "claim-die", 1)
    died = time.monotonic()
    assert status == KILLED and runs(effects) == 1
    storage = open_storage(url)
    try:
        app = application(storage, str(effects), "claim")
        with pytest.raises(ActivityClaimedError):  # within the lease: not run again
            await app.process(ACTIVITY)
        assert runs(effects) == 1
        time.sleep(max(0.0, LEASE - (time.monotonic() - died)) + 0.1)  # the lease ends
        assert await deliver(app) == {"replies": ["paid"]}  # the activity is not lost
        assert runs(effects) == 2 and await deliver(app) == {"replies": ["paid"]}
        assert runs(effects) == 2
    finally:
        await storage.close()
    assert await paid(url) == 10


async def test_a_claimed_turn_that_changed_nothing_is_recorded_all_the_same() -> None:
    """A claimed route's record replaces the claim even when the state did not change, so a
    redelivery gets the first replies instead of a claim that blocks it until the lease."""
    storage = MemoryStorage()
    app = AgentApplication(storage, app_name="shop")
    runs = 0

    @app.message("pay 10", claim=True)
    async def pay(ctx: TurnContext, state: TurnState) -> None:
        nonlocal runs
        runs += 1
        await ctx.send("paid")

    first = await app.process(ACTIVITY)
    again = await app.process(ACTIVITY)
    assert [r.text for r in first] == [r.text for r in again] == ["paid"] and runs == 1
    with pytest.raises(ActivityConflictError):  # the same id with other content
        await app.process({**ACTIVITY, "text": "pay 10 "})


def test_a_claim_needs_activity_records() -> None:
    app = AgentApplication(MemoryStorage(), dedup_retention=None)
    with pytest.raises(ValueError, match="dedup_retention"):
        app.message("pay", claim=True)
    with pytest.raises(ValueError, match="claim_lease"):
        AgentApplication(MemoryStorage(), claim_lease=0)
