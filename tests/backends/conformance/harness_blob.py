"""Conformance harnesses for BlobStorage: on Azurite, and opt-in on a real storage account.

Azurite comes from `AGENT_STATE_AZURITE_CONNECTION_STRING` (the README's test command starts
it); a real account from `AGENT_STATE_BLOB_LIVE_CONNECTION_STRING`. Each test gets a fresh
container, deleted afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

from azure.core.exceptions import ResourceNotFoundError, ServiceRequestError

from agent_state import write_group
from agent_state.backends import BlobStorage
from agent_state.backends.blob.names import blob_name
from agent_state.backends.testing import Harness
from tests.conftest import server_missing

AZURITE = "AGENT_STATE_AZURITE_CONNECTION_STRING"
LIVE = "AGENT_STATE_BLOB_LIVE_CONNECTION_STRING"


async def azurite_harness() -> AsyncIterator[Harness]:
    async with blob_harness(azurite_connection_string()) as harness:
        yield harness


async def live_harness() -> AsyncIterator[Harness]:
    async with blob_harness(os.environ[LIVE]) as harness:
        yield harness


def azurite_connection_string() -> str:
    """Azurite's connection string; skips or fails the test when it is not configured."""
    connection_string = os.environ.get(AZURITE)
    if not connection_string:
        server_missing(f"Azurite (${AZURITE} is not set)")
    return str(connection_string)


def fresh_container() -> str:
    return f"agent-state-test-{uuid.uuid4().hex[:24]}"


async def open_container(connection_string: str, container: str, **options: Any) -> BlobStorage:
    """A storage on a new container, created now; skips or fails the test if unreachable.
    Requests wait up to 20 s unless `options` say otherwise: the emulator is shared by three
    test workers on two cores."""
    storage = BlobStorage(
        container,
        connection_string=connection_string,
        write_group=write_group,
        **{"timeout": 20.0, **options},
    )
    try:
        await storage.container.create_container()
    except ServiceRequestError:
        await storage.close()
        server_missing(f"Azure Blob service of {connection_string.split(';')[-2:]}")
    return storage


async def delete_container(storage: BlobStorage) -> None:
    with contextlib.suppress(ResourceNotFoundError):
        await storage.container.delete_container()


@contextlib.asynccontextmanager
async def blob_harness(connection_string: str) -> AsyncIterator[Harness]:
    container = fresh_container()
    storage = await open_container(connection_string, container)
    others: list[BlobStorage] = []

    async def put_raw(key: str, raw: bytes) -> None:
        await storage.container.upload_blob(blob_name(key), raw, overwrite=True)

    async def get_raw(key: str) -> bytes | None:
        try:
            return await (await storage.container.download_blob(blob_name(key))).readall()
        except ResourceNotFoundError:
            return None

    async def open_another() -> BlobStorage:
        others.append(
            BlobStorage(
                container,
                connection_string=connection_string,
                write_group=write_group,
                timeout=20.0,
            )
        )
        return others[-1]

    try:
        yield Harness(storage, put_raw, get_raw, open_another)
    finally:
        await delete_container(storage)
        for other in (storage, *others):
            await other.close()
