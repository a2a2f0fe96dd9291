"""Each write group's index on Redis: a prefix inside one group is listed from a range of the
index (work in proportion to the keys listed), and the index never outlives, nor loses, a key."""

from __future__ import annotations

import asyncio

from agent_state import session_key, user_key
from agent_state.backends import RedisStorage, StoreItem
from tests.backends.test_redis_storage import RoundTrips, either, round_trips  # noqa: F401

USER = user_key("ch", "u")
SESSION = session_key("ch", "c", "u")


def index_of(storage: RedisStorage, key: str) -> bytes:
    return storage.layout.place(key).index_key


async def listed(storage: RedisStorage, prefix: str) -> list[str]:
    return sorted([key async for key in storage.list(prefix)])


async def scanned(storage: RedisStorage, prefix: str) -> list[str]:
    """The same prefix listed by a walk of the whole keyspace, to compare."""
    return sorted([key async for key in storage._scanned(prefix)])


async def test_a_users_keys_are_listed_in_one_round_trip_among_thousands(
    either: RedisStorage,  # noqa: F811
    round_trips: RoundTrips,  # noqa: F811
) -> None:
    others = {
        f"{user_key('ch', f'other{i}')}/sessions/c{i}": StoreItem({"i": i}) for i in range(3000)
    }
    for start in range(0, 3000, 500):
        batch = dict(list(others.items())[start : start + 500])
        await asyncio.gather(*(either.write({key: item}) for key, item in batch.items()))
    own = [f"{USER}/sessions/c", f"{USER}/agui-threads", f"{USER}/agui-thread-pages/0"]
    session = [f"{SESSION}/history", f"{SESSION}/history/pages/0", f"{SESSION}/runs/r"]
    await either.write({key: StoreItem({"v": 1}) for key in [USER, *own]})
    await either.write({key: StoreItem({"v": 1}) for key in [SESSION, *session]})
    for prefix, expected in ((f"{USER}/", own), (f"{SESSION}/", session)):
        before = round_trips.count
        assert await listed(either, prefix) == sorted(expected)
        # one script call (and its source once more if another test flushed the server's
        # scripts meanwhile); a scan takes a round trip per 1,000 keys of the keyspace
        assert round_trips.count - before <= 2
        assert await scanned(either, prefix) == sorted(expected)
    before = round_trips.count
    assert len(await listed(either, "ch/users/")) == 3000 + 1 + len(own)  # spans groups: a scan
    assert round_trips.count - before > 3


async def test_a_long_listing_pages_through_the_index(either: RedisStorage) -> None:  # noqa: F811
    keys = [f"{USER}/sessions/c{i:04}" for i in range(2500)]
    for start in range(0, len(keys), 500):
        await either.write({key: StoreItem({}) for key in keys[start : start + 500]})
    assert await listed(either, f"{USER}/") == keys
    assert await listed(either, f"{USER}/sessions/c1") == [k for k in keys if "/c1" in k]


async def test_the_index_lives_as_long_as_its_longest_lived_key(
    either: RedisStorage,  # noqa: F811
) -> None:
    index = index_of(either, f"{USER}/a")
    await either.write({USER: StoreItem({})})  # a group's own key is not indexed
    assert await either.client.exists(index) == 0
    await either.write({f"{USER}/a": StoreItem({})}, ttl=100)
    assert 0 < await either.client.pttl(index) <= 100_000
    await either.write({f"{USER}/b": StoreItem({})}, ttl=1000)
    assert 100_000 < await either.client.pttl(index) <= 1_000_000
    await either.write(
        {f"{USER}/a": StoreItem({}, "*")}, ttl=50
    )  # a shorter TTL does not shorten it
    assert 100_000 < await either.client.pttl(index) <= 1_000_000
    await either.write({f"{USER}/c": StoreItem({})})
    assert await either.client.pttl(index) == -1  # a key without a TTL: the index keeps
    await either.delete([f"{USER}/a", f"{USER}/b"])
    assert await either.client.zrange(index, 0, -1) == [b"/c"]
    await either.delete([f"{USER}/c"])
    assert await either.client.exists(index) == 0  # its last member gone, Redis drops it
    assert await listed(either, f"{USER}/") == []


async def test_a_key_that_expired_leaves_the_index_when_listed(
    either: RedisStorage,  # noqa: F811
) -> None:
    keys = [f"{SESSION}/runs/r{i}" for i in range(3)]
    await either.write({key: StoreItem({}) for key in keys}, ttl=60)
    await either.client.delete(either.layout.place(keys[1]).redis_key)  # as its TTL would
    assert await listed(either, f"{SESSION}/") == [keys[0], keys[2]]
    assert await either.client.zcard(index_of(either, SESSION)) == 2


async def test_writes_drop_members_whose_keys_expired(
    either: RedisStorage,  # noqa: F811
) -> None:
    """Each key a write adds to an index looks at two random members and drops those whose key
    is gone: 100 stale members among 400 fall to about 6 after 300 new keys."""
    stale = [f"{USER}/sessions/old{i}" for i in range(100)]
    await either.write({key: StoreItem({}) for key in stale})
    await either.client.delete(*(either.layout.place(key).redis_key for key in stale))
    for start in range(0, 300, 50):
        await either.write(
            {f"{USER}/sessions/new{i}": StoreItem({}) for i in range(start, start + 50)}
        )
    members = {
        member.decode() for member in await either.client.zrange(index_of(either, USER), 0, -1)
    }
    left = len(members & {key[len(USER) :] for key in stale})
    assert left < 50  # the expectation is about 6; 50 or more has a chance far below 1e-9
    assert len(members) - left == 300
