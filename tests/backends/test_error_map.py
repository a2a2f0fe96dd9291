"""One SDK error mapper: a backend's table says what each exception means; the context of a
call raises the project's error for it (cause chained) and lets the rest pass."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from azure.cosmos import PartitionKey
from azure.cosmos.aio import CosmosClient
from azure.cosmos.exceptions import CosmosHttpResponseError
from azure.storage.blob.aio import BlobServiceClient

from agent_state.backends import (
    ConflictError,
    StorageConfigError,
    StorageUnavailableError,
    unavailable,
)
from agent_state.backends._error_map import ErrorMap, Meaning, Rule
from agent_state.backends.blob.storage import _ERRORS as BLOB_ERRORS
from agent_state.backends.cosmos.storage import _ERRORS as COSMOS_ERRORS
from tests.backends.conformance.harness_cosmos import DATABASE, emulator_settings, raw_container
from tests.stores import _env

STALE = MatchConditions.IfNotModified

TABLE = ErrorMap(
    [
        Rule(PermissionError, Meaning.REFUSED, says="check the rights"),
        Rule(OSError, Meaning.MISSING, lambda exc: exc.errno == 2),
        Rule((OSError, asyncio.TimeoutError), Meaning.UNAVAILABLE),
    ]
)


def test_the_first_matching_rule_decides() -> None:
    assert TABLE.meaning(PermissionError(13, "denied")) is Meaning.REFUSED
    assert TABLE.meaning(FileNotFoundError(2, "gone")) is Meaning.MISSING
    assert TABLE.meaning(OSError(5, "I/O error")) is Meaning.UNAVAILABLE
    assert TABLE.meaning(asyncio.TimeoutError()) is Meaning.UNAVAILABLE
    assert TABLE.meaning(KeyError("k")) is None


def test_refused_is_a_config_error_and_the_rest_unavailable_with_the_cause_chained() -> None:
    refusal = PermissionError(13, "denied")
    with pytest.raises(StorageConfigError, match=r"open x failed: check the rights \(.*denied"):
        with unavailable("open x failed", TABLE):
            raise refusal
    with pytest.raises(StorageUnavailableError, match="read x failed: .*I/O error") as info:
        with unavailable("read x failed", TABLE):
            raise OSError(5, "I/O error")
    assert isinstance(info.value.__cause__, OSError)


def test_an_outcome_the_call_did_not_handle_is_a_failure_of_the_store() -> None:
    with pytest.raises(StorageUnavailableError, match="gone"):
        with unavailable("read x failed", TABLE):
            raise FileNotFoundError(2, "gone")


def test_unmapped_errors_and_the_projects_own_pass_unchanged() -> None:
    with pytest.raises(KeyError):
        with unavailable("read x failed", TABLE):
            raise KeyError("k")
    with pytest.raises(ConflictError):
        with unavailable("write x failed", TABLE):
            raise ConflictError(["k"])


def test_a_tuple_of_types_each_means_unavailable() -> None:
    with pytest.raises(StorageUnavailableError, match="list x: .*broken") as info:
        with unavailable("list x", (OSError,)):
            raise BrokenPipeError(32, "broken")
    assert isinstance(info.value.__cause__, BrokenPipeError)


async def test_blob_table_reads_azurites_real_errors() -> None:
    """The SDK's errors for a missing blob, a failed If-Match and a create over an existing
    blob mean what the Blob backend turns into outcomes."""
    service = BlobServiceClient.from_connection_string(
        _env("AGENT_STATE_AZURITE_CONNECTION_STRING", "Azurite")
    )
    container = service.get_container_client(f"t-{uuid.uuid4().hex[:12]}")
    await container.create_container()
    try:
        blob = container.get_blob_client("k")
        errors = []
        for call in (
            blob.download_blob,
            lambda: blob.upload_blob(b"{}", overwrite=True, if_match='"0x1"'),
        ):
            with pytest.raises(HttpResponseError) as info:
                await call()
            errors.append(info.value)
        await blob.upload_blob(b"{}")
        with pytest.raises(HttpResponseError) as info:
            await blob.upload_blob(b"{}", overwrite=False)
        errors.append(info.value)
        assert [BLOB_ERRORS.meaning(error) for error in errors] == [
            Meaning.MISSING,
            Meaning.MODIFIED,
            Meaning.EXISTS,
        ]
        absent = service.get_container_client(f"t-absent-{uuid.uuid4().hex[:8]}")
        with pytest.raises(StorageConfigError, match="container does not exist"):
            with unavailable("read", BLOB_ERRORS):
                await absent.get_blob_client("k").download_blob()
    finally:
        await container.delete_container()
        await service.close()


async def test_cosmos_table_reads_the_emulators_real_errors() -> None:
    endpoint, key = emulator_settings()
    name = f"test-{uuid.uuid4().hex}"
    async with raw_container(endpoint, key, name) as container:
        client = CosmosClient(endpoint, key)
        async with client:
            database = await client.create_database_if_not_exists(DATABASE)
            await database.create_container_if_not_exists(name, PartitionKey("/pk"))
            errors = []
            with pytest.raises(CosmosHttpResponseError) as info:
                await container.read_item("k", "p")
            errors.append(info.value)
            item = await container.create_item({"id": "k", "pk": "p"})
            with pytest.raises(CosmosHttpResponseError) as info:
                await container.create_item({"id": "k", "pk": "p"})
            errors.append(info.value)
            with pytest.raises(CosmosHttpResponseError) as info:
                await container.replace_item(
                    "k",
                    {"id": "k", "pk": "p"},
                    etag=item["_etag"] + "x",
                    match_condition=MatchConditions.IfNotModified,
                )
            errors.append(info.value)
        assert [COSMOS_ERRORS.meaning(error) for error in errors] == [
            Meaning.MISSING,
            Meaning.EXISTS,
            Meaning.MODIFIED,
        ]
    wrong = CosmosClient(endpoint, "d3Jvbmcga2V5")
    try:
        with pytest.raises(StorageConfigError, match="refused the credential"):
            with unavailable("open", COSMOS_ERRORS):
                await wrong.__aenter__()
    finally:
        await wrong.close()
