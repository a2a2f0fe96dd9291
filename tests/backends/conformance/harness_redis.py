"""Conformance harnesses for RedisStorage on a standalone server and on a cluster.

The servers come from `AGENT_STATE_REDIS_URL` and `AGENT_STATE_REDIS_CLUSTER_URL` (the README's
test command starts them); each test gets a fresh namespace, whose keys are removed afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from collections.abc import AsyncIterator

from redis.exceptions import RedisClusterException, RedisError

from agent_state import write_group
from agent_state.backends import RedisStorage
from agent_state.backends.redis.scripts import split_stored, stored_value
from agent_state.backends.testing import Harness
from tests.conftest import server_missing

STANDALONE_URL = "AGENT_STATE_REDIS_URL"
CLUSTER_URL = "AGENT_STATE_REDIS_CLUSTER_URL"

_raw_versions = itertools.count(1)


async def redis_harness() -> AsyncIterator[Harness]:
    async with _redis_harness(STANDALONE_URL, cluster=False) as harness:
        yield harness


async def redis_cluster_harness() -> AsyncIterator[Harness]:
    async with _redis_harness(CLUSTER_URL, cluster=True) as harness:
        yield harness


async def open_reachable(variable: str, *, cluster: bool, namespace: str) -> RedisStorage:
    """A storage on the server named by `variable`; skips or fails the test if there is none."""
    url = os.environ.get(variable)
    if not url:
        server_missing(f"Redis{' cluster' if cluster else ''} (${variable} is not set)")
    storage = RedisStorage.from_url(
        url, cluster=cluster, namespace=namespace, timeout=2, write_group=write_group
    )
    try:
        await storage.client.ping()
    except (RedisError, RedisClusterException, OSError):
        await storage.close()
        server_missing(f"Redis{' cluster' if cluster else ''} at {url}")
    return storage


async def remove_namespace(storage: RedisStorage) -> None:
    """Delete every Redis key of the storage's namespace (all nodes of a cluster)."""
    async for redis_key in storage.client.scan_iter(match=f"{storage.layout.prefix}*", count=1000):
        await storage.client.unlink(redis_key)


@contextlib.asynccontextmanager
async def _redis_harness(variable: str, *, cluster: bool) -> AsyncIterator[Harness]:
    namespace = f"test-{uuid.uuid4().hex}"
    storage = await open_reachable(variable, cluster=cluster, namespace=namespace)
    others: list[RedisStorage] = []

    async def put_raw(key: str, raw: bytes) -> None:
        value = stored_value(str(next(_raw_versions)), raw)
        await storage.client.set(storage.layout.redis_key(key), value)

    async def get_raw(key: str) -> bytes | None:
        value = await storage.client.get(storage.layout.redis_key(key))
        if value is None:
            return None
        raw = value.encode() if isinstance(value, str) else value
        stored = split_stored(raw)
        return stored[1] if stored else raw

    async def open_another() -> RedisStorage:
        others.append(
            RedisStorage.from_url(
                os.environ[variable], cluster=cluster, namespace=namespace, write_group=write_group
            )
        )
        return others[-1]

    try:
        yield Harness(storage, put_raw, get_raw, open_another)
    finally:
        for other in (storage, *others):
            await other.close()
        cleaner = RedisStorage.from_url(
            os.environ[variable], cluster=cluster, namespace=namespace, write_group=write_group
        )
        await remove_namespace(cleaner)
        await cleaner.close()
