"""CosmosStorage beyond the contract suite: ids, partitions, batches, throttling, limits and
failures, with the real SDK against a fresh in-process emulator per test; plus the opt-in
run of the contract suite against a real account."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_state import open_storage, write_group
from agent_state.backends import (
    ConflictError,
    CosmosStorage,
    InvalidValueError,
    StateTooLargeError,
    StorageConfigError,
    StorageUnavailableError,
    StoreItem,
)
from agent_state.backends.cosmos.ids import (
    MAX_ID_CHARS,
    MAX_PARTITION_KEY_BYTES,
    item_id,
    key_of_id,
    partition_value,
)
from agent_state.backends.testing import Harness, StorageContract
from tests.backends.conformance.harness_cosmos import cosmos_harness
from tests.cosmos_emulator import MASTER_KEY, running

LIVE_ENDPOINT = "AGENT_STATE_COSMOS_LIVE_ENDPOINT"
LIVE_KEY = "AGENT_STATE_COSMOS_LIVE_KEY"

CONVERSATION = "msteams/conversations/19:abc@thread.v2"
SESSION = f"{CONVERSATION}/users/29:1ada"
USER = "msteams/users/29:1ada"

segment = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00/"), min_size=1
).filter(lambda s: s not in (".", ".."))
keys = st.lists(segment, min_size=1, max_size=6).map("/".join)


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    async with running() as url:
        yield url


@pytest.fixture
async def storage(endpoint: str) -> AsyncIterator[CosmosStorage]:
    opened = CosmosStorage(endpoint, MASTER_KEY, "db", "c", write_group=write_group)
    yield opened
    await opened.close()


@pytest.fixture
async def raw(endpoint: str, storage: CosmosStorage) -> AsyncIterator[ContainerProxy]:
    await storage.read(["creates/the/container"])
    async with CosmosClient(endpoint, MASTER_KEY) as client:
        yield client.get_database_client("db").get_container_client("c")


async def throttle(endpoint: str, count: int, retry_after_ms: int) -> None:
    spec = {"count": count, "retry_after_ms": retry_after_ms, "database": "db", "container": "c"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{endpoint}/_emulator/throttle", json=spec) as response:
            assert response.status == 204


async def item_requests(endpoint: str) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{endpoint}/_emulator/stats") as response:
            return int((await response.json())["item_requests"])


@settings(max_examples=300, deadline=None)
@given(keys)
def test_item_ids_are_valid_and_reversible_where_they_fit(key: str) -> None:
    ident = item_id(key)
    assert not set(ident) & set("/\\?#") and len(ident) <= MAX_ID_CHARS and ident.isascii()
    assert key_of_id(ident) == key or (key_of_id(ident) is None and ident.startswith("!h"))


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_two_keys_never_share_an_id(first: str, second: str) -> None:
    assert (item_id(first) == item_id(second)) == (first == second)


@given(keys)
def test_partition_values_fit_the_service_limit(group: str) -> None:
    value = partition_value(group)
    assert len(value.encode()) <= MAX_PARTITION_KEY_BYTES
    assert value == group or len(group.encode()) > MAX_PARTITION_KEY_BYTES


def test_readable_and_hashed_ids() -> None:
    assert item_id("msteams/users/29:1abc") == "msteams|users|29:1abc"
    assert item_id("a|b/c!d") == "a!7Cb|c!21d"
    long_key = "k/" + "x" * 300
    assert item_id(long_key).startswith("!h") and item_id(long_key + "y") != item_id(long_key)
    assert partition_value("p" * 3000).startswith("!h")


async def test_long_keys_are_hashed_and_kept_apart(
    storage: CosmosStorage, raw: ContainerProxy
) -> None:
    first, second = "k/" + "x" * 400, "k/" + "x" * 399 + "y"
    await storage.write({first: StoreItem({"n": 1}), second: StoreItem({"n": 2})})
    found = await storage.read([first, second])
    assert {key: item.value for key, item in found.items()} == {first: {"n": 1}, second: {"n": 2}}
    stored = await raw.read_item(item_id(first), partition_value(first))
    assert stored["id"].startswith("!h") and stored["key"] == first
    assert sorted([key async for key in storage.list("k/")]) == sorted([first, second])


async def test_a_conversation_and_its_sessions_share_a_partition(endpoint: str) -> None:
    storage = open_storage("cosmos://db/c", endpoint=endpoint, credential=MASTER_KEY)
    try:
        await storage.write({k: StoreItem({"k": k}) for k in (CONVERSATION, SESSION, USER)})
        async with CosmosClient(endpoint, MASTER_KEY) as client:
            container = client.get_database_client("db").get_container_client("c")
            conversation = await container.read_item(item_id(CONVERSATION), CONVERSATION)
            session = await container.read_item(item_id(SESSION), CONVERSATION)
            user = await container.read_item(item_id(USER), USER)
        assert conversation["pk"] == session["pk"] == CONVERSATION and user["pk"] == USER
        assert (conversation["v"], conversation["key"], conversation["data"]) == (
            1,
            CONVERSATION,
            {"k": CONVERSATION},
        )
        assert "updated_at" in session["meta"]
    finally:
        await storage.close()


async def test_a_batch_failing_half_way_applies_nothing(storage: CosmosStorage) -> None:
    etags = await storage.write({CONVERSATION: StoreItem({"n": 1}), SESSION: StoreItem({"n": 1})})
    await storage.write({SESSION: StoreItem({"n": 2}, etags[SESSION])})
    other_session = f"{CONVERSATION}/users/someone"
    batch = {
        CONVERSATION: StoreItem({"n": 3}, etags[CONVERSATION]),  # fresh: would succeed
        other_session: StoreItem({"n": 3}, None),  # new: would succeed
        SESSION: StoreItem({"n": 3}, etags[SESSION]),  # stale
        USER: StoreItem({"n": 3}, None),  # another partition: committed with the rest
    }
    with pytest.raises(ConflictError) as info:
        await storage.write(batch)
    assert info.value.keys == [SESSION]
    found = await storage.read([CONVERSATION, SESSION, other_session, USER])
    assert {key: item.value["n"] for key, item in found.items()} == {CONVERSATION: 1, SESSION: 2}
    assert found[CONVERSATION].etag == etags[CONVERSATION]


async def test_a_batch_of_one_partition_commits_together(storage: CosmosStorage) -> None:
    written = await storage.write({CONVERSATION: StoreItem({"a": 1}), SESSION: StoreItem({"b": 2})})
    found = await storage.read([CONVERSATION, SESSION])
    assert {key: item.etag for key, item in found.items()} == written
    await storage.delete([CONVERSATION, SESSION], if_match=written)
    assert await storage.read([CONVERSATION, SESSION]) == {}


async def test_throttled_requests_are_retried_within_the_budget(endpoint: str) -> None:
    storage = CosmosStorage(
        endpoint, MASTER_KEY, "db", "c", throttle_retries=3, write_group=write_group
    )
    try:
        await storage.write({"k/a": StoreItem({"v": 1})})
        before = await item_requests(endpoint)
        await throttle(endpoint, 3, 10)
        assert (await storage.read(["k/a"]))["k/a"].value == {"v": 1}
        assert await item_requests(endpoint) - before == 4  # three 429s, then the read

        await throttle(endpoint, 50, 10)
        before, started = await item_requests(endpoint), time.monotonic()
        with pytest.raises(StorageUnavailableError, match="throttled"):
            await storage.write({"k/a": StoreItem({"v": 2}, "*")})
        assert await item_requests(endpoint) - before == 4  # the request and three retries
        assert time.monotonic() - started < 5
    finally:
        await throttle(endpoint, 0, 0)
        await storage.close()


async def test_a_wrong_key_is_a_config_error_and_writes_nothing(
    endpoint: str, storage: CosmosStorage
) -> None:
    await storage.write({"k/a": StoreItem({"v": 1})})
    wrong = CosmosStorage(endpoint, "d3Jvbmcga2V5", "db", "c", write_group=write_group)
    try:
        with pytest.raises(StorageConfigError, match="wrong key"):
            await wrong.write({"k/a": StoreItem({"v": 2}, "*")})
        with pytest.raises(StorageConfigError, match="wrong key"):
            await wrong.read(["k/a"])
    finally:
        await wrong.close()
    assert (await storage.read(["k/a"]))["k/a"].value == {"v": 1}


async def test_items_past_two_megabytes_fail_before_anything_is_written(
    storage: CosmosStorage,
) -> None:
    assert storage.max_document_bytes < 2 * 1024 * 1024
    with pytest.raises(StateTooLargeError):  # the data alone
        await storage.write(
            {"k/ok": StoreItem({}), "k/big": StoreItem({"x": "y" * storage.max_document_bytes})}
        )
    long_key = "k/" + "z" * 120_000  # data under the guard, but the key inside the item too
    data = {"x": "y" * (storage.max_document_bytes - 20)}
    with pytest.raises(StateTooLargeError) as info:
        await storage.write({"k/ok": StoreItem({}), long_key: StoreItem(data)})
    assert info.value.key == long_key and info.value.limit == 2 * 1024 * 1024
    half = {"x": "y" * 1_100_000}  # each fits, the partition's transactional batch does not
    with pytest.raises(StateTooLargeError):
        await storage.write(
            {"k/ok": StoreItem({}), CONVERSATION: StoreItem(half), SESSION: StoreItem(half)}
        )
    assert await storage.read(["k/ok", long_key, CONVERSATION, SESSION]) == {}


async def test_more_than_a_batch_of_one_partition_is_refused_before_io(
    storage: CosmosStorage,
) -> None:
    many = {f"{CONVERSATION}/users/{i}": StoreItem({}) for i in range(101)}
    with pytest.raises(InvalidValueError, match="at most 100"):
        await storage.write(many)
    assert [key async for key in storage.list(CONVERSATION)] == []


async def test_a_stopped_emulator_is_unavailable_not_missing() -> None:
    async with running() as url:
        storage = CosmosStorage(url, MASTER_KEY, "db", "c", timeout=2, write_group=write_group)
        await storage.write({"k/a": StoreItem({"v": 1})})
    try:
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            await storage.read(["k/a"])
        with pytest.raises(StorageUnavailableError):
            await storage.write({"k/a": StoreItem({"v": 2}, "*")})
        with pytest.raises(StorageUnavailableError):
            _ = [key async for key in storage.list()]
        assert time.monotonic() - started < 10
    finally:
        await storage.close()


async def test_a_server_that_never_answers_times_out() -> None:
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    storage = CosmosStorage(
        f"http://127.0.0.1:{port}", MASTER_KEY, "db", "c", timeout=0.5, write_group=write_group
    )
    try:
        started = time.monotonic()
        with pytest.raises(StorageUnavailableError):
            await storage.read(["k/a"])
        assert time.monotonic() - started < 5
    finally:
        await storage.close()
        server.close()
        await server.wait_closed()


async def test_a_deleted_container_is_an_error_not_a_missing_key(
    storage: CosmosStorage, raw: ContainerProxy, endpoint: str
) -> None:
    await storage.write({"k/a": StoreItem({"v": 1})})
    async with CosmosClient(endpoint, MASTER_KEY) as client:
        await client.get_database_client("db").delete_container("c")
    with pytest.raises(StorageUnavailableError):
        await storage.read(["k/a"])


async def test_a_container_not_made_for_it_is_a_config_error(endpoint: str) -> None:
    async with CosmosClient(endpoint, MASTER_KEY) as client:
        database = await client.create_database_if_not_exists("db")
        await database.create_container("by-id", PartitionKey("/id"), default_ttl=-1)
        await database.create_container("no-ttl", PartitionKey("/pk"))
    for name, message in (
        ("by-id", "partitioned on"),
        ("no-ttl", "TTL off"),
        ("none", "not exist"),
    ):
        storage = CosmosStorage(
            endpoint, MASTER_KEY, "db", name, create=False, write_group=write_group
        )
        try:
            with pytest.raises(StorageConfigError, match=message):
                await storage.read(["k/a"])
        finally:
            await storage.close()


async def test_from_url_options_and_environment(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_COSMOS_ENDPOINT", endpoint)
    monkeypatch.setenv("AZURE_COSMOS_KEY", MASTER_KEY)
    storage = CosmosStorage.from_url("cosmos://db/from-env?timeout=3", write_group=write_group)
    try:
        await storage.write({"k/a": StoreItem({"v": 1})})
        assert storage.container_name == "from-env"
    finally:
        await storage.close()
    with pytest.raises(StorageConfigError, match="'colour'"):
        CosmosStorage.from_url("cosmos://db/c?colour=blue&timeout=3", write_group=write_group)
    for bad in ("cosmos://db", "cosmos://db/c/extra", "cosmos://db/c?create=maybe"):
        with pytest.raises(StorageConfigError):
            CosmosStorage.from_url(bad, write_group=write_group)
    with pytest.raises(StorageConfigError, match="not exist"):
        missing = CosmosStorage.from_url("cosmos://db/absent?create=false", write_group=write_group)
        try:
            await missing.read(["k/a"])
        finally:
            await missing.close()
    monkeypatch.delenv("AZURE_COSMOS_KEY")
    with pytest.raises(StorageConfigError, match="AZURE_COSMOS_KEY"):
        CosmosStorage.from_url("cosmos://db/c", write_group=write_group)


async def test_ttl_is_sent_as_whole_seconds_counted_from_ts(
    storage: CosmosStorage, raw: ContainerProxy
) -> None:
    for ttl, sent in ((0.2, 2), (5.5, 7), (60, 61)):
        await storage.write({"k/t": StoreItem({"v": ttl}, "*")}, ttl=ttl)
        assert (await raw.read_item(item_id("k/t"), "k/t"))["ttl"] == sent
    await storage.write({"k/t": StoreItem({"v": 0}, "*")})  # no ttl: kept for good
    assert "ttl" not in await raw.read_item(item_id("k/t"), "k/t")


if os.environ.get(LIVE_ENDPOINT) and os.environ.get(LIVE_KEY):  # opt-in: collected when asked

    class TestLiveCosmosContract(StorageContract):
        """The contract suite on a real account, when `$AGENT_STATE_COSMOS_LIVE_ENDPOINT` and
        `$AGENT_STATE_COSMOS_LIVE_KEY` name one (each test makes and drops a container)."""

        @pytest.fixture
        async def harness(self) -> AsyncIterator[Harness]:
            endpoint, key = os.environ[LIVE_ENDPOINT], os.environ[LIVE_KEY]
            async with cosmos_harness(endpoint, key) as harness:
                yield harness


async def test_storages_opening_a_new_container_at_once_all_open(endpoint: str) -> None:
    # each checks the database and container exist, finds them missing and creates them:
    # all but one creation meet a 409 from the service, which must not fail the open
    storages = [
        CosmosStorage(endpoint, MASTER_KEY, "fresh-db", "fresh", write_group=write_group)
        for _ in range(4)
    ]
    try:
        etags = await asyncio.gather(
            *(s.write({f"k/{i}": StoreItem({"i": i}, None)}) for i, s in enumerate(storages))
        )
        assert [list(etag) for etag in etags] == [[f"k/{i}"] for i in range(4)]
        found = await storages[0].read([f"k/{i}" for i in range(4)])
        assert {key: item.value for key, item in found.items()} == {
            f"k/{i}": {"i": i} for i in range(4)
        }
    finally:
        for opened in storages:
            await opened.close()
