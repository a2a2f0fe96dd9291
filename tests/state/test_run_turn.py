"""run_turn: a turn whose save cannot merge runs again on the newer state, within a budget."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent_state import SessionState, StateConflictError, TurnIds, TurnState, open_turn
from agent_state import _lifecycle as lifecycle
from agent_state._lifecycle import run_turn
from agent_state.backends import FileStorage, MemoryStorage, Storage

IDS = TurnIds(channel_id="c", user_id="u", conversation_id="k", app_name="a")
CONVERSATION = "c/conversations/k"


async def stored(storage: Storage, key: str) -> dict[str, Any] | None:
    item = (await storage.read([key])).get(key)
    return item.value if item is not None else None


async def test_fifty_concurrent_increments_all_count() -> None:
    storage = MemoryStorage()

    async def increment(state: TurnState, attempt: int) -> int:
        count = state.get("conversation.count", 0)
        await asyncio.sleep(0)  # let the others read the same version
        state["conversation:count"] = count + 1
        return attempt

    attempts = await asyncio.gather(*(run_turn(storage, IDS, increment) for _ in range(50)))
    assert await stored(storage, CONVERSATION) == {"count": 50}
    assert max(attempts) > 1  # they did meet each other


@pytest.mark.parametrize(
    "where",
    [("conversation:a", "conversation:b"), ("user:a", "conversation:b")],
    ids=["inside a bucket", "across buckets"],
)
async def test_write_skew_never_breaks_the_rule(where: tuple[str, str]) -> None:
    """Rule a + b >= 1: each turn reads both and zeroes one of them only while both are 1."""
    storage = MemoryStorage()
    paths = [member.replace(":", ".") for member in where]
    for _ in range(20):
        async with open_turn(storage, IDS) as state:
            state[where[0]], state[where[1]] = 1, 1

        def zero(member: str) -> Callable[[TurnState, int], Awaitable[None]]:
            async def body(state: TurnState, attempt: int) -> None:
                a, b = state.get(paths[0]), state.get(paths[1])
                await asyncio.sleep(0)
                if a + b >= 2:
                    state[member] = 0

            return body

        await asyncio.gather(*(run_turn(storage, IDS, zero(member)) for member in where))
        async with open_turn(storage, IDS) as state:
            assert state.get(paths[0]) + state.get(paths[1]) == 1


async def test_the_runs_are_bounded_and_the_error_says_so() -> None:
    storage = MemoryStorage()
    seen: list[int] = []

    async def always_overtaken(state: TurnState, attempt: int) -> None:
        seen.append(attempt)
        count = state.get("conversation.count", 0)
        async with open_turn(storage, IDS) as other:  # another writer gets in first, every time
            other["conversation:count"] = count + 100
        state["conversation:count"] = count + 1

    with pytest.raises(StateConflictError, match="gave up after 3 runs of the turn"):
        await run_turn(storage, IDS, always_overtaken, attempts=3)
    assert seen == [1, 2, 3]
    with pytest.raises(ValueError):
        await run_turn(storage, IDS, always_overtaken, attempts=0)


async def test_the_backoff_grows_with_the_runs_and_with_how_long_a_run_takes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow store's turn must spread its re-runs over as long as a run takes, or the
    contenders meet again at once (three processes on Blob storage gave up after 10 runs)."""
    windows: list[float] = []

    def no_wait(low: float, high: float) -> float:
        windows.append(high)
        return 0.0

    monkeypatch.setattr(random, "uniform", no_wait)  # the module _lifecycle draws from
    storage = MemoryStorage()

    async def slow_and_overtaken(state: TurnState, attempt: int) -> None:
        count = state.get("conversation.count", 0)
        await asyncio.sleep(0.05)  # the run's own duration, which the backoff scales with
        async with open_turn(storage, IDS) as other:
            other["conversation:count"] = count + 100
        state["conversation:count"] = count + 1

    with pytest.raises(StateConflictError):
        await run_turn(storage, IDS, slow_and_overtaken, attempts=7)
    assert len(windows) == 6
    cap = lifecycle.BACKOFF_CAP
    # each run lasts at least 0.05 s, so run n's window is at least 0.05 * 2**n, up to the cap
    assert all(cap >= w >= min(cap, 0.045 * 2**n) for n, w in enumerate(windows))
    assert windows[0] < cap  # it follows the run's duration, not a fixed wait
    assert windows[-1] == lifecycle.BACKOFF_CAP


async def test_a_save_across_files_that_conflicts_applies_nothing_and_runs_again(
    tmp_path: Path,
) -> None:
    """FileStorage writes file by file, yet a failed save leaves none of its buckets stored,
    so the turn runs again without applying anything twice."""
    storage = FileStorage(tmp_path)
    runs: list[int] = []

    async def body(state: TurnState, attempt: int) -> None:
        runs.append(attempt)
        seen = state.get("session.n", 0)
        if attempt == 1:
            async with open_turn(storage, IDS) as other:
                other["session:n"] = seen + 10  # changes what this turn read
        state["user:n"] = state.get("user.n", 0) + 1
        state["session:n"] = seen + 1

    await run_turn(storage, IDS, body)
    assert runs == [1, 2]
    assert await stored(storage, "c/users/u") == {"n": 1}
    assert await stored(storage, "c/conversations/k/users/u/agents/a") == {"n": 11}


class LastSeen(SessionState):
    last_writer_wins = True


async def test_a_last_writer_wins_scope_overwrites_instead_of_running_again() -> None:
    storage = MemoryStorage()
    runs: list[int] = []

    async def body(state: TurnState, attempt: int) -> None:
        runs.append(attempt)
        seen = state.get("session.seen", 0)
        async with open_turn(storage, IDS, scopes=[LastSeen]) as other:
            other["session:seen"] = seen + 100
            other["session:by"] = "other"
        state["session:seen"] = seen + 1

    await run_turn(storage, IDS, body, scopes=[LastSeen])
    assert runs == [1]
    assert await stored(storage, "c/conversations/k/users/u/agents/a") == {"seen": 1}
