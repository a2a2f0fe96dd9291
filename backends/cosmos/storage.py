"""Azure Cosmos DB storage on `azure.cosmos.aio`: point reads, conditional point writes,
one transactional batch per partition, and one prefix query for `list`.

An item is the envelope's fields plus `id` and `pk`: `{"id", "pk", "v", "key", "meta",
"data", "ttl"?}`; its version is the item's `_etag`. Ids and partition key values come from
`ids`. Configuration, limits and guarantees: docs/cosmos.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import aiohttp
import orjson
from azure.core import MatchConditions
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import AzureError
from azure.core.pipeline.transport import AioHttpTransport
from azure.cosmos import PartitionKey
from azure.cosmos.aio import ContainerProxy, CosmosClient
from azure.cosmos.exceptions import (
    CosmosBatchOperationError,
    CosmosHttpResponseError,
    CosmosResourceExistsError,
)

from .._base import Storage, WriteGroup, gather_all
from .._envelope import envelope_fields, envelope_size, unwrap
from .._error_map import ErrorMap, Meaning, Rule, unavailable
from .._errors import (
    InvalidValueError,
    StateTooLargeError,
    StorageConfigError,
    StorageUnavailableError,
)
from .._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, remaining
from .._options import UrlOptions, count, seconds
from .ids import item_id, partition_value

MAX_ITEM_BYTES: Final = 2 * 1024 * 1024
"""The service's limit on an item's JSON (UTF-8), and on a transactional batch request."""

SYSTEM_RESERVE: Final = 1024
"""Room left in an item for the system fields the service adds (`_rid`, `_etag`, `_ts`, ...)."""

MAX_BATCH_OPERATIONS: Final = 100
"""The service's limit on the operations of one transactional batch."""

PARTITION_KEY_PATH: Final = "/pk"
LIST_QUERY: Final = "SELECT c.key FROM c WHERE STARTSWITH(c.key, @prefix)"
ENV_ENDPOINT: Final = "AZURE_COSMOS_ENDPOINT"
ENV_KEY: Final = "AZURE_COSMOS_KEY"

DEFAULT_TIMEOUT: Final = 10.0
"""Seconds one storage call may take, retries included, before StorageUnavailableError."""

_ENVELOPE_FIELDS = ("v", "key", "meta", "data")  # in `wrap`'s order, so data can be sliced out
_URL_OPTIONS = ("endpoint", "key", "create", "timeout")
_OWNER_MISSING = 1003  # sub-status of a 404 whose database or container is gone


def _status(*codes: int) -> Callable[[CosmosHttpResponseError], bool]:
    return lambda exc: exc.status_code in codes


def _missing_item(exc: CosmosHttpResponseError) -> bool:
    """A 404 for the item itself, not for its container or database."""
    return exc.status_code == 404 and exc.sub_status != _OWNER_MISSING


_ERRORS = ErrorMap(
    [
        Rule(
            CosmosHttpResponseError,
            Meaning.REFUSED,
            _status(401, 403),
            "the service refused the credential: wrong key, or no access to the container",
        ),
        Rule(
            CosmosHttpResponseError,
            Meaning.UNAVAILABLE,
            _status(429),
            "still throttled (429) after the retry budget",
        ),
        Rule(CosmosHttpResponseError, Meaning.EXISTS, _status(409)),
        Rule(CosmosHttpResponseError, Meaning.MODIFIED, _status(412)),
        Rule(CosmosHttpResponseError, Meaning.MISSING, _missing_item),
        Rule((AzureError, aiohttp.ClientError, OSError, asyncio.TimeoutError), Meaning.UNAVAILABLE),
    ]
)
"""What azure-cosmos's, aiohttp's and the socket's errors mean."""
_CONFLICTS = (Meaning.EXISTS, Meaning.MODIFIED, Meaning.MISSING)


class CosmosStorage(Storage):
    """Documents as items of one Cosmos DB container, partitioned by write group.

    `credential` is the account's master key or an async azure-identity credential; the
    client stays ours and is closed by `close`. The database and container are created on
    first use unless `create=False`. `throttle_retries` / `throttle_wait` bound how often
    and how long (seconds in all) a throttled (429) request is retried after the service's
    `x-ms-retry-after-ms`; `timeout` bounds each call. `client_options` go to `CosmosClient`.
    """

    max_document_bytes = 2_000_000
    """`data` of at most this size leaves room in the 2 MB item for the envelope; the whole
    item is checked against 2 MB too, before anything is written."""

    max_ttl_seconds = float(2**31 - 3)
    """Cosmos keeps `ttl` as a 32-bit int; one second is added (see `_ttl_seconds`)."""

    atomic_groups = True
    atomic_batches = False
    needs_write_group = True

    def __init__(
        self,
        endpoint: str,
        credential: str | AsyncTokenCredential,
        database: str,
        container: str,
        *,
        write_group: WriteGroup | None = None,
        max_document_bytes: int | None = None,
        create: bool = True,
        timeout: float = DEFAULT_TIMEOUT,
        throttle_retries: int = 9,
        throttle_wait: float = 10.0,
        concurrency: int = 32,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        for name, value in (("endpoint", endpoint), ("database", database)):
            if not isinstance(value, str) or not value:
                raise StorageConfigError(f"CosmosStorage needs a non-empty {name} string")
        if not isinstance(container, str) or not container:
            raise StorageConfigError("CosmosStorage needs a non-empty container string")
        if not (isinstance(credential, str) and credential) and not hasattr(
            credential, "get_token"
        ):
            raise StorageConfigError(
                "CosmosStorage needs a master key (str) or an async azure-identity credential"
            )
        timeout, throttle_wait = (
            seconds("timeout", timeout),
            seconds("throttle_wait", throttle_wait),
        )
        throttle_retries = count("throttle_retries", throttle_retries)
        self.endpoint = endpoint
        self.database_name = database
        self.container_name = container
        self._create = create
        self._timeout = float(timeout)
        options = dict(client_options or {})
        options.setdefault("transport", AioHttpTransport(use_env_settings=False))
        try:
            self._client = CosmosClient(
                endpoint,
                credential,
                connection_timeout=timeout,
                read_timeout=timeout,
                retry_total=0,
                retry_throttle_total=throttle_retries,
                retry_throttle_backoff_max=throttle_wait,
                enable_compact_utf8_item_writes=True,
                **options,
            )
        except (TypeError, ValueError, AzureError) as exc:
            raise StorageConfigError(f"cannot configure Cosmos DB for {endpoint!r}: {exc}") from exc
        self._slots = asyncio.Semaphore(count("concurrency", concurrency))
        self._container: ContainerProxy | None = None
        self._opening = asyncio.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        endpoint: str | None = None,
        credential: str | AsyncTokenCredential | None = None,
        create: bool | None = None,
        timeout: float | None = None,
        **options: Any,
    ) -> CosmosStorage:
        """Open `cosmos://<database>/<container>?endpoint=...&key=...&create=...&timeout=...`.

        The endpoint and key default to `$AZURE_COSMOS_ENDPOINT` and `$AZURE_COSMOS_KEY`;
        keyword arguments override the URL. Other keywords go to the constructor.
        """
        parts = urlsplit(url)
        names = [unquote(part) for part in (parts.netloc, parts.path.strip("/"))]
        if parts.scheme != "cosmos" or not all(names) or "/" in names[1]:
            raise StorageConfigError(f"expected cosmos://<database>/<container>, got {url!r}")
        query = UrlOptions("cosmos", parts.query, _URL_OPTIONS)
        endpoint = endpoint or query.text("endpoint") or os.environ.get(ENV_ENDPOINT)
        credential = credential or query.text("key") or os.environ.get(ENV_KEY)
        if not endpoint:
            raise StorageConfigError(f"no Cosmos DB endpoint: set ${ENV_ENDPOINT} or ?endpoint=")
        if not credential:
            raise StorageConfigError(
                f"no Cosmos DB credential: set ${ENV_KEY}, or pass credential= (a master key"
                " or an azure-identity credential)"
            )
        return cls(
            endpoint,
            credential,
            names[0],
            names[1],
            create=create if create is not None else query.flag("create") is not False,
            timeout=timeout if timeout is not None else query.seconds("timeout") or DEFAULT_TIMEOUT,
            **options,
        )

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        container = await self._ready()
        items = await gather_all([self._read_one(container, key) for key in keys])
        return {key: item for key, item in zip(keys, items, strict=True) if item is not None}

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        groups: dict[str, list[tuple[PreparedWrite, dict[str, Any]]]] = defaultdict(list)
        for write in writes:
            pk = partition_value(write.group)
            groups[pk].append((write, self._item(write, pk, _ttl_seconds(write.ttl))))
        for group in groups.values():
            _check_batch(group)
        container = await self._ready()
        await gather_all(
            [
                self._write_one(container, pk, *group[0], outcomes)
                if len(group) == 1
                else self._write_batch(container, pk, group, outcomes)
                for pk, group in groups.items()
            ]
        )

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        container = await self._ready()
        await gather_all(
            [self._delete_one(container, key, if_match.get(key), outcomes) for key in keys]
        )

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        container = await self._ready()
        rows = container.query_items(
            LIST_QUERY, parameters=[{"name": "@prefix", "value": prefix}], timeout=self._timeout
        )
        with self._mapped("list"):
            async for row in rows:
                key = row.get("key")
                if isinstance(key, str) and key.startswith(prefix):
                    yield key

    async def _close(self) -> None:
        with self._mapped("close"):
            await self._client.close()

    def _item(self, write: PreparedWrite, pk: str, ttl: int | None) -> dict[str, Any]:
        """The item body of a write (its value as is, not parsed from its bytes), checked
        against the 2 MB item limit."""
        body: dict[str, Any] = {"id": item_id(write.key), "pk": pk}
        body.update(envelope_fields(write.key, write.value))
        envelope = envelope_size(write.key, write.data)
        if ttl is not None and write.ttl is not None:
            body["ttl"] = ttl
            body["meta"]["expires_at"] = expires_at = time.time() + write.ttl
            envelope += len(orjson.dumps({"expires_at": expires_at}))
        size = envelope + len(orjson.dumps([body["id"], pk, ttl])) + 32 + SYSTEM_RESERVE
        if size > MAX_ITEM_BYTES:
            raise StateTooLargeError(write.key, size, MAX_ITEM_BYTES)
        return body

    async def _read_one(self, container: ContainerProxy, key: str) -> StoreItem | None:
        async with self._slots:
            with self._mapped("read"):
                try:
                    item = await container.read_item(
                        item_id(key), partition_value(self.group_of(key)), timeout=self._timeout
                    )
                except CosmosHttpResponseError as exc:
                    if _ERRORS.meaning(exc) is Meaning.MISSING:
                        return None
                    raise
        fields = {name: item[name] for name in _ENVELOPE_FIELDS if name in item}
        envelope = unwrap(key, orjson.dumps(fields))
        ttl = remaining(envelope.expires_at, time.time())  # <= 0 until the service removes it
        return StoreItem(envelope.data, item["_etag"], envelope.raw_data, ttl)

    async def _write_one(
        self,
        container: ContainerProxy,
        pk: str,
        write: PreparedWrite,
        body: dict[str, Any],
        outcomes: Outcomes,
    ) -> None:
        async with self._slots:
            with self._mapped("write"):
                try:
                    if write.expected == ANY:
                        stored = await container.upsert_item(body, timeout=self._timeout)
                    elif write.expected is None:
                        stored = await container.create_item(body, timeout=self._timeout)
                    else:
                        stored = await container.replace_item(
                            body["id"],
                            body,
                            etag=write.expected,
                            match_condition=MatchConditions.IfNotModified,
                            timeout=self._timeout,
                        )
                except CosmosHttpResponseError as exc:
                    if _ERRORS.meaning(exc) in _CONFLICTS:
                        outcomes[write.key] = CONFLICT
                        return
                    raise
        outcomes[write.key] = stored["_etag"]

    async def _write_batch(
        self,
        container: ContainerProxy,
        pk: str,
        group: list[tuple[PreparedWrite, dict[str, Any]]],
        outcomes: Outcomes,
    ) -> None:
        operations: list[Any] = []
        for write, body in group:
            if write.expected == ANY:
                operations.append(("upsert", (body,)))
            elif write.expected is None:
                operations.append(("create", (body,)))
            else:
                operations.append(
                    ("replace", (body["id"], body), {"if_match_etag": write.expected})
                )
        async with self._slots:
            with self._mapped("write"):
                try:
                    results = await container.execute_item_batch(
                        operations, partition_key=pk, timeout=self._timeout
                    )
                except CosmosBatchOperationError as exc:
                    failed = exc.operation_responses[exc.error_index]
                    if failed.get("statusCode") not in (404, 409, 412):
                        raise StorageUnavailableError(
                            f"Cosmos DB batch refused: {failed.get('statusCode')} {exc.message}"
                        ) from exc
                    outcomes[group[exc.error_index][0].key] = CONFLICT
                    return
        for (write, _), result in zip(group, results, strict=True):
            outcomes[write.key] = _result_etag(result)

    async def _delete_one(
        self, container: ContainerProxy, key: str, etag: str | None, outcomes: Outcomes
    ) -> None:
        conditions: dict[str, Any] = {}
        if etag is not None:
            conditions = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        async with self._slots:
            with self._mapped("delete"):
                try:
                    await container.delete_item(
                        item_id(key),
                        partition_value(self.group_of(key)),
                        timeout=self._timeout,
                        **conditions,
                    )
                except CosmosHttpResponseError as exc:
                    meaning = _ERRORS.meaning(exc)
                    if meaning is Meaning.MODIFIED or (
                        etag is not None and meaning is Meaning.MISSING
                    ):
                        outcomes[key] = CONFLICT
                    elif meaning is not Meaning.MISSING:
                        raise

    async def _ready(self) -> ContainerProxy:
        """The container, opened (and created if allowed and missing) on first use."""
        if self._container is not None:
            return self._container
        async with self._opening:
            if self._container is None:
                with self._mapped("open"):
                    self._container = await asyncio.wait_for(self._open(), self._timeout * 3)
        return self._container

    async def _open(self) -> ContainerProxy:
        await self._client.__aenter__()  # reads the account: a wrong key fails here
        database = self._client.get_database_client(self.database_name)
        container = database.get_container_client(self.container_name)
        if self._create:
            # the SDK reads, then creates what is missing: another process (or storage) may
            # create it in between, and the 409 that follows means it is there
            with contextlib.suppress(CosmosResourceExistsError):
                database = await self._client.create_database_if_not_exists(self.database_name)
            with contextlib.suppress(CosmosResourceExistsError):
                container = await database.create_container_if_not_exists(
                    self.container_name,
                    partition_key=PartitionKey(PARTITION_KEY_PATH),
                    default_ttl=-1,
                )
        try:
            properties = await container.read()
        except CosmosHttpResponseError as exc:
            if exc.status_code == 404:
                raise StorageConfigError(
                    f"Cosmos DB container {self.database_name}/{self.container_name} does not"
                    " exist (create=False)"
                ) from exc
            raise
        _check_container(properties, f"{self.database_name}/{self.container_name}")
        return container

    def _mapped(self, what: str) -> unavailable:
        """The context of a call: SDK and network failures mapped by `_ERRORS`."""
        where = f"{self.endpoint} {self.database_name}/{self.container_name}"
        return unavailable(f"Cosmos DB {what} on {where} failed", _ERRORS)


def _ttl_seconds(ttl: float | None) -> int | None:
    """Cosmos `ttl` for a storage ttl: whole seconds, counted from `_ts` (rounded down to the
    second), so one second more than `ttl` rounded up keeps the item at least `ttl`."""
    return None if ttl is None else math.ceil(ttl) + 1


def _check_batch(group: list[tuple[PreparedWrite, dict[str, Any]]]) -> None:
    """Refuse, before any I/O, a partition's writes that cannot be one transactional batch."""
    if len(group) > MAX_BATCH_OPERATIONS:
        raise InvalidValueError(
            f"{len(group)} keys of write group {group[0][0].group!r} in one write; Cosmos DB"
            f" applies at most {MAX_BATCH_OPERATIONS} together"
        )
    if len(group) > 1:
        size = sum(len(write.data) for write, _ in group)
        if size + SYSTEM_RESERVE * len(group) > MAX_ITEM_BYTES:
            largest = max(group, key=lambda pair: len(pair[0].data))[0]
            raise StateTooLargeError(largest.key, size, MAX_ITEM_BYTES)


def _check_container(properties: dict[str, Any], name: str) -> None:
    paths = (properties.get("partitionKey") or {}).get("paths")
    if paths != [PARTITION_KEY_PATH]:
        raise StorageConfigError(
            f"Cosmos DB container {name} is partitioned on {paths}, not [{PARTITION_KEY_PATH!r}]"
        )
    if properties.get("defaultTtl") is None:
        raise StorageConfigError(
            f"Cosmos DB container {name} has TTL off; set its defaultTtl to -1 so items can expire"
        )


def _result_etag(result: dict[str, Any]) -> str:
    body = result.get("resourceBody")
    etag = body.get("_etag") if isinstance(body, dict) else result.get("eTag")
    return str(etag)
