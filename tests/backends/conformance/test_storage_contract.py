"""The library's storage contract suite (`agent_state.backends.testing`) on every backend."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from agent_state.backends.testing import Harness, StorageContract
from tests.backends.conformance.harness_file import file_harness, grouped_file_harness
from tests.backends.conformance.harness_memory import memory_harness
from tests.backends.conformance.harness_redis import redis_cluster_harness, redis_harness

HARNESSES = {
    "memory": memory_harness,
    "redis": redis_harness,
    "redis-cluster": redis_cluster_harness,
    "file": file_harness,
    "file-grouped": grouped_file_harness,
}


class TestStorageContract(StorageContract):
    @pytest.fixture(params=sorted(HARNESSES))
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        factory = contextlib.asynccontextmanager(HARNESSES[request.param])
        async with factory() as harness:
            yield harness
