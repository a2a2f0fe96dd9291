"""Conformance harness for CosmosStorage: a fresh container per test, raw access by the SDK.

The emulator comes from `AGENT_STATE_COSMOS_ENDPOINT` / `AGENT_STATE_COSMOS_KEY` (the README's
test command starts `python -m tests.cosmos_emulator`); `cosmos_harness` also serves the
opt-in run against a real account. Raw access plants and fetches items the way the backend
lays them out: the envelope's fields plus `id` and `pk`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from azure.core.exceptions import AzureError
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import CosmosResourceNotFoundError

from agent_state import write_group
from agent_state.backends import CosmosStorage
from agent_state.backends.cosmos.ids import item_id, partition_value
from agent_state.backends.testing import Harness
from tests.conftest import server_missing

ENDPOINT = "AGENT_STATE_COSMOS_ENDPOINT"
KEY = "AGENT_STATE_COSMOS_KEY"
DATABASE = "agent-state-tests"
NOT_ENVELOPE = ("id", "pk", "ttl", "_rid", "_self", "_etag", "_attachments", "_ts")


def emulator_settings() -> tuple[str, str]:
    """The emulator's endpoint and key; skips or fails the test if they are not set."""
    endpoint, key = os.environ.get(ENDPOINT), os.environ.get(KEY)
    if not endpoint or not key:
        server_missing(f"the Cosmos DB emulator (${ENDPOINT} / ${KEY} are not set)")
    assert endpoint and key
    return endpoint, key


async def emulator_harness() -> AsyncIterator[Harness]:
    async with cosmos_harness(*emulator_settings()) as harness:
        yield harness


@contextlib.asynccontextmanager
async def raw_container(endpoint: str, key: str, name: str) -> AsyncIterator[ContainerProxy]:
    """The SDK's own client on a container (which the storage creates); deleted on exit."""
    client = CosmosClient(endpoint, key)
    try:
        await client.__aenter__()
    except (AzureError, OSError):
        await client.close()
        server_missing(f"Cosmos DB at {endpoint}")
    try:
        yield client.get_database_client(DATABASE).get_container_client(name)
    finally:
        with contextlib.suppress(CosmosResourceNotFoundError):
            await client.get_database_client(DATABASE).delete_container(name)
        await client.close()


@contextlib.asynccontextmanager
async def cosmos_harness(endpoint: str, key: str) -> AsyncIterator[Harness]:
    name = f"test-{uuid.uuid4().hex}"
    async with raw_container(endpoint, key, name) as container:
        storage = CosmosStorage(endpoint, key, DATABASE, name, write_group=write_group)
        others: list[CosmosStorage] = []

        async def put_raw(key: str, raw: bytes) -> None:
            body: dict[str, Any] = orjson.loads(raw)
            body.update(id=item_id(key), pk=partition_value(storage.group_of(key)))
            await container.upsert_item(body)

        async def get_raw(key: str) -> bytes | None:
            pk = partition_value(storage.group_of(key))
            try:
                item = await container.read_item(item_id(key), pk)
            except CosmosResourceNotFoundError:
                return None
            return orjson.dumps({k: v for k, v in item.items() if k not in NOT_ENVELOPE})

        async def open_another() -> CosmosStorage:
            others.append(CosmosStorage(endpoint, key, DATABASE, name, write_group=write_group))
            return others[-1]

        try:
            await storage.read(["harness/creates-the-container"])
            yield Harness(storage, put_raw, get_raw, open_another, stores_bytes=False)
        finally:
            for other in (storage, *others):
                await other.close()
