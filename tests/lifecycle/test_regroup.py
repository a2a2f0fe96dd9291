"""`regroup`: a store agent-state 0.1.0 wrote (a user's records each their own write group, no
Redis index) is brought to today's groups, with every document's value and TTL, on every
backend that places keys by group, and left as it is on Blob. (A file store lays itself out
as it opens: tests/backends/test_file_layout.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agent_state import (
    earlier_write_group,
    forget_user,
    open_storage,
    regroup,
    thread_index_key,
    user_key,
    write_group,
)
from agent_state.backends import Storage, StoreItem
from tests.cli.support import cli
from tests.lifecycle.support import CHANNEL, activity, application
from tests.stores import STORES

PLACED_BY_GROUP = ("redis", "redis-cluster", "cosmos")


@pytest.fixture(params=[name for name in STORES if name not in ("memory", "file")])
def url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    return STORES[request.param](str(tmp_path))


@pytest.fixture
async def stores(url: str) -> AsyncIterator[tuple[Storage, Storage]]:
    """The same store opened with today's write groups and with 0.1.0's."""
    async with open_storage(url) as storage:
        async with open_storage(url, write_group=earlier_write_group) as earlier:
            yield storage, earlier


async def written_by_0_1_0(earlier: Storage) -> dict[str, StoreItem]:
    """Turns of two users and an AG-UI thread index written with 0.1.0's groups; what the
    store holds then, read back through them."""
    app = application(earlier)
    for user, conversation in (("ada", "c1"), ("bob", "c1"), ("ada", "c2")):
        await app.process(activity(user, conversation, f"hi from {user}"))
    index = thread_index_key(user_key(CHANNEL, "ada"), "bot")
    await earlier.write({index: StoreItem({"threads": ["c2"]})}, ttl=3600)
    keys = [key async for key in earlier.list("")]
    return await earlier.read(keys)


def moved(keys: list[str]) -> list[str]:
    return [key for key in keys if earlier_write_group(key) != write_group(key)]


async def test_regroup_brings_every_document_to_its_group_now(
    url: str, stores: tuple[Storage, Storage]
) -> None:
    storage, earlier = stores
    before = await written_by_0_1_0(earlier)
    changed = moved(list(before))
    assert len(changed) == 4  # ada's two sessions and thread index, bob's session
    by_group = storage.needs_write_group
    assert by_group == url.startswith(("redis", "cosmos"))
    if by_group:  # where today's groups do not find them yet
        assert await storage.read(changed) == {}

    report = await regroup(storage, earlier)
    assert report.moved == (len(changed) if by_group else 0)
    after = await storage.read(list(before))
    assert {key: item.value for key, item in after.items()} == {
        key: item.value for key, item in before.items()
    }
    index = thread_index_key(user_key(CHANNEL, "ada"), "bot")
    assert 3500 < (after[index].ttl or 0) <= 3600
    if by_group:
        assert await earlier.read(changed) == {}  # nothing left where 0.1.0 placed them
    assert sorted([key async for key in storage.list(user_key(CHANNEL, "ada") + "/")]) == sorted(
        key for key in before if key.startswith(user_key(CHANNEL, "ada") + "/")
    )
    again = await regroup(storage, earlier)
    assert again.moved == 0 and (await storage.read(list(before))).keys() == after.keys()
    await forget_user(storage, CHANNEL, "ada")
    assert [key async for key in storage.list(user_key(CHANNEL, "ada"))] == []


@pytest.mark.parametrize("backend", PLACED_BY_GROUP)
async def test_an_interrupted_regroup_is_finished_by_the_next(
    backend: str, tmp_path: object
) -> None:
    """A copy already moved (the run died before deleting the earlier one) is kept, and the
    earlier copy goes; the command line runs it."""
    url = STORES[backend](str(tmp_path))
    async with (
        open_storage(url) as storage,
        open_storage(url, write_group=earlier_write_group) as earlier,
    ):
        entry = f"{user_key(CHANNEL, 'ada')}/sessions/c1"
        await earlier.write({entry: StoreItem({"at": "earlier"})})
        await storage.write({entry: StoreItem({"at": "moved"})})
        result = await asyncio.to_thread(cli, "regroup", store=url)
        assert result.returncode == 0, result.stderr
        assert "moved 1 documents" in result.stdout
        assert (await storage.read([entry]))[entry].value == {"at": "moved"}
        assert await earlier.read([entry]) == {}
