"""A session's message history: paging, ordering, refusals and formats on every backend,
appends saved all-or-nothing with the turn, concurrent appends from processes, and a cost
per append that does not grow with the history."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_state import HistoryError, TurnIds, open_storage, open_turn, session_key
from agent_state._lifecycle import run_turn
from agent_state.backends import FormatError, MemoryStorage, Storage, StoreItem
from tests.stores import SHARED, STORES

IDS = TurnIds(channel_id="h", user_id="ada", conversation_id="c1", app_name="hist")
HEAD = f"{session_key('h', 'c1', 'ada', agent='hist')}/history"


def message(ident: str, role: str = "user") -> dict[str, Any]:
    return {"id": ident, "role": role, "content": f"text of {ident}"}


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()


async def append(storage: Storage, *messages: dict[str, Any]) -> None:
    async with open_turn(storage, IDS) as state:
        await state.history.append(*messages)


async def test_paging_and_reading_from_any_message(storage: Storage) -> None:
    rng = random.Random(7)
    ids: list[str] = []
    while len(ids) < 110:  # several pages, appended in batches of random size
        batch = [f"m{len(ids) + i}" for i in range(rng.randint(1, 40))]
        await append(storage, *(message(i) for i in batch))
        ids += batch
    async with open_turn(storage, IDS) as state:
        history = state.history
        assert await history.count() == len(ids)
        assert [m["id"] for m in await history.last(45)] == ids[-45:]
        assert [m["id"] for m in await history.last(1000)] == ids
        assert await history.last(0) == []
        for pivot in rng.sample(range(len(ids)), 12):
            after = await history.after(ids[pivot], limit=33)
            assert [m["id"] for m in after] == ids[pivot + 1 : pivot + 34]
            before = await history.before(ids[pivot], limit=33)
            assert [m["id"] for m in before] == ids[max(0, pivot - 33) : pivot]
            assert [m["id"] for m in await history.upto(ids[pivot])] == ids[: pivot + 1]
        assert [m["id"] for m in await history.after(None, limit=5)] == ids[:5]
        assert (await history.last(1))[0] == message(ids[-1])


async def test_bad_messages_are_refused_before_anything_changes(storage: Storage) -> None:
    await append(storage, message("a"))
    bad: list[Any] = [
        "text",
        {"role": "user"},
        {"id": "", "role": "user"},
        {"id": "x", "role": "robot"},
        {"id": "x", "role": "user", "n": float("nan")},
        {"id": "x", "role": "user", "t": (1, 2)},
    ]
    for item in bad:
        with pytest.raises(HistoryError):
            await append(storage, message("fresh"), item)
    with pytest.raises(HistoryError, match="repeat"):
        await append(storage, message("b"), message("b"))
    with pytest.raises(HistoryError, match="already holds"):
        await append(storage, message("c"), message("a"))
    async with open_turn(storage, IDS) as state:
        assert [m["id"] for m in await state.history.last(10)] == ["a"]
        with pytest.raises(HistoryError, match="no message"):
            await state.history.after("nope")
        with pytest.raises(HistoryError):
            await state.history.last(-1)


async def test_appends_commit_with_the_buckets_or_not_at_all() -> None:
    storage = MemoryStorage()
    with pytest.raises(RuntimeError):
        async with open_turn(storage, IDS) as state:
            state["conversation:n"] = 1
            await state.history.append(message("lost"))
            raise RuntimeError("the handler failed")
    assert await storage.read([HEAD]) == {}

    async def body(state: Any, attempt: int) -> None:
        if attempt == 1:  # another writer overtakes what this turn read
            async with open_turn(storage, IDS) as other:
                other["conversation:n"] = other.get("conversation.n", 0) + 10
        state["conversation:n"] = state.get("conversation.n", 0) + 1
        await state.history.append(message(f"run-{attempt}"))

    await run_turn(storage, IDS, body)
    async with open_turn(storage, IDS) as state:
        assert state.get("conversation.n") == 11
        assert [m["id"] for m in await state.history.last(5)] == ["run-2"]  # once, the last run


async def test_a_history_of_another_format_is_refused_and_kept(storage: Storage) -> None:
    planted = {"format": 2, "count": 1, "tail": [message("x")]}
    page = {"format": 0, "messages": []}
    await storage.write({HEAD: StoreItem(planted), f"{HEAD}/pages/0": StoreItem(page)})
    async with open_turn(storage, IDS) as state:
        with pytest.raises(FormatError, match="history format 2"):
            await state.history.last(1)
        with pytest.raises(FormatError):
            await state.history.append(message("y"))
    stored = await storage.read([HEAD, f"{HEAD}/pages/0"])
    assert stored[HEAD].value == planted and stored[f"{HEAD}/pages/0"].value == page
    current = {"format": 1, "page_size": 32, "count": 40, "tail": [message("t")] * 8}
    await storage.write({HEAD: StoreItem(current, stored[HEAD].etag)})
    async with open_turn(storage, IDS) as state:
        with pytest.raises(FormatError, match="history_page format 0"):  # an older page
            await state.history.last(10)


class Counting(MemoryStorage):
    """Counts the documents read and written."""

    def __init__(self) -> None:
        super().__init__()
        self.keys_read = self.keys_written = 0

    async def read(self, keys: Any) -> dict[str, StoreItem]:
        keys = list(keys)
        self.keys_read += len(keys)
        return await super().read(keys)

    async def write(self, changes: Any, **options: Any) -> dict[str, str]:
        self.keys_written += len(changes) + len(options.get("unchanged") or {})
        return await super().write(changes, **options)


async def test_an_append_costs_the_same_at_ten_and_at_two_thousand_messages() -> None:
    storage = Counting()

    async def turn_cost(n: int) -> tuple[int, int, int]:
        storage.keys_read = storage.keys_written = 0
        async with open_turn(storage, IDS) as state:
            await state.history.append(message(f"q{n}"), message(f"a{n}", "assistant"))
            await state.history.last(20)
        size = len(orjson.dumps((await storage.read([HEAD]))[HEAD].value))
        return storage.keys_read, storage.keys_written, size

    costs = {}
    for n in range(1000):
        cost = await turn_cost(n)
        if n in (5, 999):
            costs[n] = cost
    (read_5, written_5, head_5), (read_999, written_999, head_999) = costs[5], costs[999]
    assert read_999 <= read_5 + 1 and written_999 <= written_5 + 1  # a page may fill
    assert head_999 < 3 * head_5 + 2000  # the head holds at most a page of messages


@pytest.mark.parametrize("name", SHARED)
async def test_concurrent_appends_from_processes_all_land_once(tmp_path: Path, name: str) -> None:
    url = STORES[name](str(tmp_path))
    script = (
        "import asyncio, sys\n"
        "from agent_state import TurnIds, open_storage\n"
        "from agent_state._lifecycle import run_turn\n"
        "ids = TurnIds(channel_id='h', user_id='ada', conversation_id='c1', app_name='hist')\n"
        "async def main(url, who):\n"
        "    storage = open_storage(url)\n"
        "    for i in range(15):\n"
        "        async def body(state, attempt, i=i):\n"
        "            await state.history.append({'id': f'{who}-{i}', 'role': 'user'})\n"
        "        await run_turn(storage, ids, body)\n"
        "    await storage.close()\n"
        "asyncio.run(main(sys.argv[1], sys.argv[2]))\n"
    )
    workers = [subprocess.Popen([sys.executable, "-c", script, url, f"p{i}"]) for i in range(3)]
    assert [worker.wait(120) for worker in workers] == [0, 0, 0], name
    storage = open_storage(url)
    try:
        async with open_turn(storage, IDS) as state:
            ids = [m["id"] for m in await state.history.last(100)]
    finally:
        await storage.close()
    assert sorted(ids) == sorted(f"p{p}-{i}" for p in range(3) for i in range(15)), name
    for p in range(3):  # each process's messages in the order it appended them
        mine = [i for i in ids if i.startswith(f"p{p}-")]
        assert mine == [f"p{p}-{i}" for i in range(15)], name
