"""Backends whose layout depends on the write group (Redis: the hash tag; Cosmos DB: the
partition key) never pick one silently, so a storage built directly and one opened by
`open_storage` on the same store read each other's keys (on the real servers)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis, RedisCluster

import agent_state
from agent_state import open_storage
from agent_state.backends import (
    CosmosStorage,
    RedisStorage,
    Storage,
    StorageConfigError,
    StoreItem,
    whole_key,
)
from tests.backends.conformance.harness_cosmos import DATABASE, emulator_settings, raw_container
from tests.backends.conformance.harness_redis import CLUSTER_URL, STANDALONE_URL, remove_namespace
from tests.conftest import server_missing

SESSION = "teams/conversations/c1/users/u1"
CONVERSATION = "teams/conversations/c1"

DirectAndOpened = Callable[[], contextlib.AbstractAsyncContextManager[tuple[Storage, Storage]]]


def _url(variable: str) -> str:
    url = os.environ.get(variable)
    if not url:
        server_missing(f"Redis (${variable} is not set)")
    return str(url)


@contextlib.asynccontextmanager
async def _redis(cluster: bool) -> AsyncIterator[tuple[Storage, Storage]]:
    """A RedisStorage around the caller's own client, and `open_storage` on the same server."""
    url = _url(CLUSTER_URL if cluster else STANDALONE_URL)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    client = (RedisCluster if cluster else Redis).from_url(url)
    direct = RedisStorage(
        client, namespace=namespace, owns_client=True, write_group=agent_state.write_group
    )
    opened = open_storage(f"{url}?namespace={namespace}&cluster={str(cluster).lower()}")
    try:
        yield direct, opened
    finally:
        await remove_namespace(direct)
        await direct.close()
        await opened.close()


@contextlib.asynccontextmanager
async def _cosmos() -> AsyncIterator[tuple[Storage, Storage]]:
    """A CosmosStorage built from its parts, and `open_storage` on the same container."""
    endpoint, key = emulator_settings()
    name = f"test-{uuid.uuid4().hex}"
    async with raw_container(endpoint, key, name):
        direct = CosmosStorage(endpoint, key, DATABASE, name, write_group=agent_state.write_group)
        opened = open_storage(f"cosmos://{DATABASE}/{name}", endpoint=endpoint, credential=key)
        try:
            yield direct, opened
        finally:
            await direct.close()
            await opened.close()


STORES: dict[str, DirectAndOpened] = {
    "redis": lambda: _redis(cluster=False),
    "redis-cluster": lambda: _redis(cluster=True),
    "cosmos": _cosmos,
}


@pytest.mark.parametrize("store", sorted(STORES))
async def test_a_direct_storage_and_open_storage_read_each_others_keys(
    store: str,
) -> None:
    async with STORES[store]() as (direct, opened):
        await direct.write({SESSION: StoreItem({"by": "direct"})})
        await opened.write({CONVERSATION: StoreItem({"by": "opened"})})
        seen_by_opened = await opened.read([SESSION])
        seen_by_direct = await direct.read([CONVERSATION])
        assert seen_by_opened[SESSION].value == {"by": "direct"}
        assert seen_by_direct[CONVERSATION].value == {"by": "opened"}
        # and the session joins its conversation's group: one atomic write of both
        etags = await direct.write(
            {
                SESSION: StoreItem({"n": 2}, seen_by_opened[SESSION].etag),
                CONVERSATION: StoreItem({"n": 2}, seen_by_direct[CONVERSATION].etag),
            }
        )
        again = await opened.read([SESSION, CONVERSATION])
        assert {key: item.etag for key, item in again.items()} == etags


RULE = r"write_group=: agent_state\.write_group .* or agent_state\.backends\.whole_key"


async def test_redis_storage_without_a_write_group_is_refused() -> None:
    client = Redis.from_url("redis://127.0.0.1:1/0")  # no I/O until a command
    try:
        with pytest.raises(StorageConfigError, match=f"RedisStorage places each key.*{RULE}"):
            RedisStorage(client)
        with pytest.raises(StorageConfigError, match=RULE):
            RedisStorage.from_url("redis://127.0.0.1:1/0")
        with pytest.raises(StorageConfigError, match=RULE):
            RedisStorage.from_url("redis://127.0.0.1:1/0?cluster=true")
        one_per_key = RedisStorage(client, write_group=whole_key)
        assert one_per_key.layout.redis_key(SESSION) == "{" + SESSION + "}"
    finally:
        await client.aclose()


async def test_cosmos_storage_without_a_write_group_is_refused() -> None:
    with pytest.raises(StorageConfigError, match=f"CosmosStorage places each key.*{RULE}"):
        CosmosStorage("https://127.0.0.1:1", "a2V5", "db", "c")
    with pytest.raises(StorageConfigError, match=RULE):
        CosmosStorage.from_url("cosmos://db/c?endpoint=https://127.0.0.1:1&key=a2V5")
    one_per_key = CosmosStorage("https://127.0.0.1:1", "a2V5", "db", "c", write_group=whole_key)
    try:
        assert one_per_key.group_of(SESSION) == SESSION
    finally:
        await one_per_key.close()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "cosmos://db/c?endpoint=https://h:1"])
async def test_open_storage_passes_the_key_schemes_rule(url: str) -> None:
    storage = (
        open_storage(url, credential="a2V5") if url.startswith("cosmos") else open_storage(url)
    )
    try:
        assert storage.group_of(SESSION) == CONVERSATION == agent_state.write_group(SESSION)
    finally:
        await storage.close()
