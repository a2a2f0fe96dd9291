"""Turn queues: one turn per key at a time, in arrival order; a turn inside a turn of its own
key does not wait for itself; a cancelled waiter neither blocks nor loses the queue."""

from __future__ import annotations

import asyncio

import pytest

from agent_state import TurnQueues


async def test_turns_of_one_key_run_one_at_a_time_in_arrival_order() -> None:
    queues = TurnQueues()
    running: list[int] = []
    order: list[int] = []

    async def turn(n: int) -> None:
        async with queues.turn("k"):
            running.append(n)
            assert len(running) == 1  # nobody else holds the key
            order.append(n)
            await asyncio.sleep(0)
            running.remove(n)

    await asyncio.gather(*(turn(n) for n in range(20)))
    assert order == list(range(20))
    assert len(queues) == 0  # idle keys cost nothing


async def test_other_keys_do_not_wait() -> None:
    queues = TurnQueues()
    inside = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with queues.turn("a"):
            inside.set()
            await release.wait()

    task = asyncio.ensure_future(holder())
    await inside.wait()
    async with queues.turn("b"):  # would hang if keys shared one queue
        assert len(queues) == 2
    release.set()
    await task


async def test_a_turn_inside_a_turn_of_its_key_does_not_wait_for_itself() -> None:
    queues = TurnQueues()
    async with queues.turn("k"):
        async with queues.turn("k"):
            nested = asyncio.ensure_future(_enter(queues, "k"))  # a task it starts, too
            await nested
    assert len(queues) == 0


async def _enter(queues: TurnQueues, key: str) -> None:
    async with queues.turn(key):
        pass


@pytest.mark.parametrize("handed_first", [False, True])
async def test_a_cancelled_waiter_neither_blocks_nor_loses_the_queue(handed_first: bool) -> None:
    queues = TurnQueues()
    release = asyncio.Event()
    entered: list[str] = []

    async def turn(name: str) -> None:
        async with queues.turn("k"):
            entered.append(name)
            if name == "first":
                await release.wait()

    first = asyncio.ensure_future(turn("first"))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(turn("cancelled"))
    last = asyncio.ensure_future(turn("last"))
    await asyncio.sleep(0)
    if handed_first:  # the key is handed to the waiter, which is cancelled before it runs
        release.set()
        await asyncio.sleep(0)  # the first turn leaves and hands the key on
        assert first.done() and not waiter.done()
        waiter.cancel()
    else:  # cancelled while it waits
        waiter.cancel()
        release.set()
        await first
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.wait_for(last, 10)  # a lost hand-off would leave it waiting for good
    assert entered == ["first", "last"]
    assert len(queues) == 0
