"""Parametrizes the storage conformance suite over every backend's harness."""

from __future__ import annotations

import contextlib

import pytest

from tests.conformance.harness import Harness
from tests.conformance.harness_file import file_harness
from tests.conformance.harness_memory import memory_harness
from tests.conformance.harness_redis import redis_cluster_harness, redis_harness

HARNESSES = {
    "memory": memory_harness,
    "redis": redis_harness,
    "redis-cluster": redis_cluster_harness,
    "file": file_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
async def harness(request: pytest.FixtureRequest):
    factory = contextlib.asynccontextmanager(HARNESSES[request.param])
    async with factory() as h:
        yield h


@pytest.fixture
def storage(harness: Harness):
    return harness.storage
