"""The test emulator keeps the Cosmos DB behaviour BACKENDS.md lists, checked with the real
`azure-cosmos` SDK and with plain signed HTTP requests (signatures computed here, apart
from the emulator's own code). Each test runs a fresh emulator in-process on a free port."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import time
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from azure.core import MatchConditions
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import (
    CosmosAccessConditionFailedError,
    CosmosBatchOperationError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
    CosmosResourceNotFoundError,
)

from tests.cosmos_emulator import MASTER_KEY, running

ITEMS = "dbs/db/colls/c/docs"


@pytest.fixture
async def endpoint() -> AsyncIterator[str]:
    async with running() as url:
        yield url


@pytest.fixture
async def client(endpoint: str) -> AsyncIterator[CosmosClient]:
    async with CosmosClient(endpoint, MASTER_KEY) as cosmos:
        yield cosmos


@pytest.fixture
async def container(client: CosmosClient) -> ContainerProxy:
    database = await client.create_database_if_not_exists("db")
    return await database.create_container_if_not_exists(
        "c", partition_key=PartitionKey("/pk"), default_ttl=-1
    )


@pytest.fixture
async def http(endpoint: str) -> AsyncIterator[SignedHttp]:
    async with aiohttp.ClientSession() as session:
        yield SignedHttp(session, endpoint)


class SignedHttp:
    """Plain HTTP requests signed with a master key the way BACKENDS.md describes."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: str) -> None:
        self.session = session
        self.endpoint = endpoint

    async def request(
        self,
        verb: str,
        path: str,
        *,
        key: str = MASTER_KEY,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        segments = [s for s in path.split("/") if s]
        if len(segments) % 2 == 0:
            kind, link = (segments[-2] if segments else ""), "/".join(segments)
        else:
            kind, link = segments[-1], "/".join(segments[:-1])
        date = formatdate(usegmt=True)
        text = f"{verb.lower()}\n{kind.lower()}\n{link}\n{date.lower()}\n\n"
        signature = base64.b64encode(
            hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
        ).decode()
        sent = {
            "x-ms-date": date,
            "x-ms-version": "2020-07-15",
            "authorization": quote(f"type=master&ver=1.0&sig={signature}", safe=""),
            **(headers or {}),
        }
        async with self.session.request(
            verb, self.endpoint + path, json=body, headers=sent
        ) as response:
            payload = await response.json() if response.content_type == "application/json" else None
            return response.status, dict(response.headers), payload

    async def control(self, path: str, spec: dict[str, Any] | None = None) -> Any:
        if spec is None:
            async with self.session.get(f"{self.endpoint}/_emulator/{path}") as response:
                return await response.json()
        async with self.session.post(f"{self.endpoint}/_emulator/{path}", json=spec) as response:
            assert response.status == 204


def pk(value: str) -> dict[str, str]:
    return {"x-ms-documentdb-partitionkey": f'["{value}"]'}


async def test_account_advertises_its_own_address(http: SignedHttp) -> None:
    status, _, account = await http.request("GET", "/")
    assert status == 200
    address = http.endpoint.removeprefix("http://")
    assert account["writableLocations"][0]["databaseAccountEndpoint"] == f"http://{address}/"


async def test_items_carry_system_fields_and_fresh_etags(container: ContainerProxy) -> None:
    created = await container.create_item({"id": "a", "pk": "g", "n": 1})
    assert {"_etag", "_rid", "_ts"} <= set(created) and created["n"] == 1
    replaced = await container.replace_item(
        "a",
        {"id": "a", "pk": "g", "n": 2},
        etag=created["_etag"],
        match_condition=MatchConditions.IfNotModified,
    )
    assert replaced["_etag"] != created["_etag"]
    read = await container.read_item("a", partition_key="g")
    assert read["n"] == 2 and read["_etag"] == replaced["_etag"]


async def test_conditions_and_missing_items_raise_the_sdk_errors(container: ContainerProxy) -> None:
    first = await container.create_item({"id": "a", "pk": "g"})
    with pytest.raises(CosmosResourceExistsError):
        await container.create_item({"id": "a", "pk": "g"})
    await container.upsert_item({"id": "a", "pk": "g", "n": 2})
    with pytest.raises(CosmosAccessConditionFailedError):
        await container.replace_item(
            "a",
            {"id": "a", "pk": "g"},
            etag=first["_etag"],
            match_condition=MatchConditions.IfNotModified,
        )
    with pytest.raises(CosmosAccessConditionFailedError):
        await container.delete_item(
            "a", "g", etag=first["_etag"], match_condition=MatchConditions.IfNotModified
        )
    with pytest.raises(CosmosResourceNotFoundError):
        await container.read_item("a", partition_key="other partition")
    await container.delete_item("a", "g")
    with pytest.raises(CosmosResourceNotFoundError):
        await container.delete_item("a", "g")


async def test_error_bodies_statuses_and_if_none_match(
    container: ContainerProxy, http: SignedHttp
) -> None:
    status, _, created = await http.request(
        "POST", f"/{ITEMS}/", body={"id": "a", "pk": "g"}, headers=pk("g")
    )
    assert status == 201
    status, headers, _ = await http.request(
        "GET", f"/{ITEMS}/a", headers={**pk("g"), "If-None-Match": created["_etag"]}
    )
    assert status == 304
    status, _, error = await http.request("GET", f"/{ITEMS}/missing/", headers=pk("g"))
    assert status == 404 and error["code"] == "NotFound" and error["message"]
    status, _, error = await http.request(
        "PUT",
        f"/{ITEMS}/a",
        body={"id": "a", "pk": "g"},
        headers={**pk("g"), "If-Match": '"stale"'},
    )
    assert status == 412 and error["code"] == "PreconditionFailed"
    status, _, error = await http.request(
        "POST", f"/{ITEMS}", body={"id": "b", "pk": "other"}, headers=pk("g")
    )
    assert status == 400  # the body's partition key must be the header's


async def test_same_id_in_two_partitions_is_two_items(container: ContainerProxy) -> None:
    await container.create_item({"id": "same", "pk": "one", "n": 1})
    await container.create_item({"id": "same", "pk": "two", "n": 2})
    assert (await container.read_item("same", "one"))["n"] == 1
    assert (await container.read_item("same", "two"))["n"] == 2


async def test_items_over_two_megabytes_are_refused(container: ContainerProxy) -> None:
    with pytest.raises(CosmosHttpResponseError) as info:
        await container.create_item({"id": "big", "pk": "g", "blob": "x" * (2 * 1024 * 1024)})
    assert info.value.status_code == 413
    with pytest.raises(CosmosResourceNotFoundError):
        await container.read_item("big", "g")


async def test_per_item_ttl_counts_from_ts_and_needs_default_ttl(client: CosmosClient) -> None:
    database = await client.create_database_if_not_exists("db")
    with_ttl = await database.create_container_if_not_exists(
        "ttl", partition_key=PartitionKey("/pk"), default_ttl=-1
    )
    without = await database.create_container_if_not_exists("plain", PartitionKey("/pk"))
    item = {"id": "a", "pk": "g", "ttl": 1}
    written = await with_ttl.create_item(item)
    await without.create_item(item)
    await with_ttl.create_item({"id": "forever", "pk": "g"})
    with pytest.raises(CosmosHttpResponseError) as info:
        await with_ttl.create_item({"id": "zero", "pk": "g", "ttl": 0})
    assert info.value.status_code == 400
    while True:
        try:
            await with_ttl.read_item("a", "g")
        except CosmosResourceNotFoundError:
            break
        assert time.time() < written["_ts"] + 3, "the item outlived its ttl"
        await asyncio.sleep(0.05)  # waiting for the clock
    assert time.time() >= written["_ts"] + 1  # not before _ts + ttl
    assert (await without.read_item("a", "g"))["ttl"] == 1  # TTL off: ttl is just a field
    assert (await with_ttl.read_item("forever", "g"))["id"] == "forever"
    await with_ttl.create_item(item)  # an expired id can be created again


async def test_the_prefix_query_spans_partitions_and_other_queries_are_refused(
    container: ContainerProxy,
) -> None:
    for i, key in enumerate(["a/1", "a/2", "ab/3", "b/4"]):
        await container.create_item({"id": str(i), "pk": f"p{i}", "key": key})
    await container.create_item({"id": "nokey", "pk": "p"})
    query = "SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)"
    rows = container.query_items(query, parameters=[{"name": "@prefix", "value": "a/"}])
    assert sorted([row["key"] async for row in rows]) == ["a/1", "a/2"]
    every = container.query_items(query, parameters=[{"name": "@prefix", "value": ""}])
    assert len([row async for row in every]) == 4
    with pytest.raises(CosmosHttpResponseError) as info:
        _ = [row async for row in container.query_items("SELECT * FROM c")]
    assert info.value.status_code == 400


async def test_query_results_come_in_pages(container: ContainerProxy) -> None:
    for i in range(7):
        await container.create_item({"id": str(i), "pk": "g", "key": f"k/{i}"})
    query = "SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)"
    pages = container.query_items(
        query, parameters=[{"name": "@prefix", "value": "k/"}], max_item_count=3
    ).by_page()
    sizes = [len([row async for row in page]) async for page in pages]
    assert sizes == [3, 3, 1]


async def test_a_batch_applies_all_or_nothing(container: ContainerProxy) -> None:
    existing = await container.create_item({"id": "a", "pk": "g", "n": 1})
    results = await container.execute_item_batch(
        [
            ("upsert", ({"id": "b", "pk": "g"},)),
            (
                "replace",
                ("a", {"id": "a", "pk": "g", "n": 2}),
                {"if_match_etag": existing["_etag"]},
            ),
        ],
        partition_key="g",
    )
    assert [r["statusCode"] for r in results] == [201, 200]
    with pytest.raises(CosmosBatchOperationError) as info:
        await container.execute_item_batch(
            [
                ("upsert", ({"id": "c", "pk": "g"},)),
                (
                    "replace",
                    ("a", {"id": "a", "pk": "g", "n": 3}),
                    {"if_match_etag": existing["_etag"]},
                ),
                ("delete", ("b",)),
            ],
            partition_key="g",
        )
    error = info.value
    assert error.error_index == 1
    assert [r["statusCode"] for r in error.operation_responses] == [424, 412, 424]
    with pytest.raises(CosmosResourceNotFoundError):
        await container.read_item("c", "g")
    assert (await container.read_item("a", "g"))["n"] == 2
    assert (await container.read_item("b", "g"))["id"] == "b"


async def test_a_wrong_key_or_no_signature_is_401(endpoint: str, http: SignedHttp) -> None:
    with pytest.raises(CosmosHttpResponseError) as info:
        async with CosmosClient(endpoint, base64.b64encode(b"not the key").decode()):
            pass
    assert info.value.status_code == 401
    status, _, error = await http.request("GET", "/", key=base64.b64encode(b"wrong").decode())
    assert status == 401 and error["code"] == "Unauthorized"
    async with http.session.get(endpoint + "/dbs") as response:
        assert response.status == 401


async def test_paths_with_and_without_trailing_slash(
    container: ContainerProxy, http: SignedHttp
) -> None:
    await container.create_item({"id": "a", "pk": "g"})
    for path in (f"/{ITEMS}/a", f"/{ITEMS}/a/"):
        status, _, item = await http.request("GET", path, headers=pk("g"))
        assert status == 200 and item["id"] == "a"
    for path in ("/dbs/db/colls/c", "/dbs/db/colls/c/"):
        status, _, properties = await http.request("GET", path)
        assert status == 200 and properties["partitionKey"]["paths"] == ["/pk"]


async def test_item_requests_of_a_missing_container_are_404_1003(
    container: ContainerProxy, http: SignedHttp
) -> None:
    status, headers, _ = await http.request("GET", "/dbs/db/colls/gone/docs/a", headers=pk("g"))
    assert status == 404 and headers["x-ms-substatus"] == "1003"


async def test_injected_throttling_answers_429_then_recovers(
    container: ContainerProxy, http: SignedHttp, client: CosmosClient
) -> None:
    other = await (await client.create_database_if_not_exists("db")).create_container_if_not_exists(
        "other", PartitionKey("/pk")
    )
    await container.create_item({"id": "a", "pk": "g"})
    await http.control(
        "throttle", {"count": 2, "retry_after_ms": 7, "database": "db", "container": "c"}
    )
    await other.create_item({"id": "x", "pk": "g"})  # another container is not throttled
    for _ in range(2):
        status, headers, error = await http.request("GET", f"/{ITEMS}/a", headers=pk("g"))
        assert status == 429 and headers["x-ms-retry-after-ms"] == "7"
        assert error["code"] == "TooManyRequests"
    status, _, _ = await http.request("GET", f"/{ITEMS}/a", headers=pk("g"))
    assert status == 200
    before = (await http.control("stats"))["item_requests"]
    await http.control("throttle", {"count": 3, "retry_after_ms": 5})
    assert (await container.read_item("a", "g"))["id"] == "a"  # the SDK retried past them
    assert (await http.control("stats"))["item_requests"] - before == 4
