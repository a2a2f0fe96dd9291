"""Moving data in: what M365's own BlobStorage (on Azurite) and CosmosDBStorage (on the Cosmos
DB emulator) wrote, copied into every backend, resumably, with nothing refused silently."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from azure.cosmos.aio import CosmosClient
from azure.storage.blob.aio import ContainerClient
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState
from microsoft_agents.hosting.core.storage import StoreItem as M365StoreItem
from microsoft_agents.storage.blob import BlobStorage as M365BlobStorage
from microsoft_agents.storage.blob import BlobStorageConfig
from microsoft_agents.storage.cosmos import CosmosDBStorage as M365CosmosStorage
from microsoft_agents.storage.cosmos import CosmosDBStorageConfig

from agent_state import TurnIds, open_turn
from agent_state.backends import Storage
from agent_state.bridges.m365 import (
    AgentStateStorage,
    ImportReport,
    import_m365_blobs,
    import_m365_cosmos,
)
from tests.bridges.m365_support import Item
from tests.conftest import server_missing
from tests.cosmos_emulator import MASTER_KEY, running
from tests.stores import STORES

WRITTEN: dict[str, M365StoreItem] = {
    "msteams/users/29:ada": CachedAgentState(cast(Any, {"visits": 2})),
    "msteams/conversations/19:c": CachedAgentState(cast(Any, {"topic": "release"})),
    "auth:_SignInState:msteams:29:ada": Item({"active_handler": "graph"}),
    "items/a list": Item([1, {"two": 2}]),
}


def env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if not value:
        server_missing(what)
    return str(value)


async def check_moved(storage: Storage, report: ImportReport, refused: set[str]) -> None:
    assert report.moved == len(WRITTEN) and set(report.refused) == refused
    assert report.differing == [] and report.complete is not bool(refused)
    bridge = AgentStateStorage(storage)
    found = await bridge.read(list(WRITTEN), target_cls=Item)
    assert {k: v.value for k, v in found.items()} == {
        k: v.store_item_to_json() for k, v in WRITTEN.items()
    }
    async with open_turn(storage, TurnIds("msteams", "29:ada", "19:c")) as state:
        assert state.user["visits"] == 2 and state.conversation["topic"] == "release"


@pytest.fixture
async def blob_container() -> AsyncIterator[ContainerClient]:
    connection = env("AGENT_STATE_AZURITE_CONNECTION_STRING", "Azurite")
    name = f"m365-{uuid.uuid4().hex[:12]}"
    theirs = M365BlobStorage(BlobStorageConfig(container_name=name, connection_string=connection))
    await theirs.write(dict(WRITTEN))
    async with ContainerClient.from_connection_string(connection, name) as container:
        await container.upload_blob("broken", b"{not json")
        yield container
        await container.delete_container()


async def test_blobs_written_by_m365_move_in_and_a_rerun_moves_nothing_twice(
    storage: Storage, blob_container: ContainerClient
) -> None:
    report = await import_m365_blobs(blob_container, storage)
    await check_moved(storage, report, {"broken"})
    assert "not JSON" in report.refused["broken"]

    again = await import_m365_blobs(blob_container, storage)
    assert (again.moved, again.unchanged, set(again.refused)) == (0, len(WRITTEN), {"broken"})

    await AgentStateStorage(storage).write({"items/a list": Item(["changed here"])})
    third = await import_m365_blobs(blob_container, storage, concurrency=1)
    assert third.differing == ["items/a list"] and third.unchanged == len(WRITTEN) - 1
    found = await AgentStateStorage(storage).read(["items/a list"], target_cls=Item)
    assert found["items/a list"].value == ["changed here"], "never overwritten"


async def test_cosmos_items_written_by_m365_move_in(storage: Storage) -> None:
    async with running() as endpoint:  # a private emulator: M365 writes, the import reads
        await cosmos_import(storage, endpoint, MASTER_KEY)


async def cosmos_import(storage: Storage, endpoint: str, key: str) -> None:
    database, container_id = "m365", f"c{uuid.uuid4().hex[:12]}"
    theirs = M365CosmosStorage(
        CosmosDBStorageConfig(
            cosmos_db_endpoint=endpoint, auth_key=key, database_id=database,
            container_id=container_id,
        )
    )  # fmt: skip
    await theirs.write(dict(WRITTEN))
    async with CosmosClient(endpoint, credential=key) as client:
        container = client.get_database_client(database).get_container_client(container_id)
        await container.upsert_item({"id": "stray", "note": "not M365's"})
        report = await import_m365_cosmos(container, storage)
        await check_moved(storage, report, {"(item id 'stray' has no realId)"})
        again = await import_m365_cosmos(container, storage)
        assert (again.moved, again.unchanged) == (0, len(WRITTEN))
        await client.get_database_client(database).delete_container(container_id)


def test_every_backend_is_a_target() -> None:
    assert set(STORES) == {"memory", "file", "redis", "redis-cluster", "blob", "cosmos"}
