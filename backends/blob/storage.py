"""Azure Blob Storage on `azure.storage.blob.aio`: one blob per key, the blob's ETag its version.

A batch read is concurrent GETs and a write batch concurrent conditional PUTs (If-Match for
a version, If-None-Match: * for a create), so either takes one round trip of wall time.
Blob has no multi-blob transaction: each key is atomic on its own. Names come from
`names`; configuration, TTL and limits are in docs/azure-blob.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.storage.blob import BlobProperties, ContentSettings, StorageErrorCode
from azure.storage.blob.aio import BlobClient, BlobServiceClient, LinearRetry

from .._base import Storage, WriteGroup, expired, gather_all
from .._commit import Clock
from .._envelope import parse_head, unwrap, wrap
from .._error_map import ErrorMap, Meaning, Rule, first_line, unavailable
from .._errors import StorageConfigError
from .._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, _Conflict, remaining
from .._options import UrlOptions, count, seconds
from .names import blob_name, is_hashed, key_for_name, list_prefix

CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
"""Where `from_url` finds the connection string by default (the Azure SDKs' convention)."""

DEFAULT_TIMEOUT = 3.0
"""Seconds to connect, or to wait for the next bytes of a reply, before a call fails."""

DEFAULT_CONCURRENCY = 32
"""Requests one batch keeps in flight at most."""

CLIENT_CACHE_SIZE = 1024
"""Blob clients kept for reuse (they share the service's connections; each is a few KB)."""

EXPIRES_METADATA = "expires_at"
"""Blob metadata holding a TTL'd document's expiry (Unix time), so `list` needs no GET."""

_URL_OPTIONS = (
    "account_url",
    "connection_string_env",
    "create_container",
    "max_concurrency",
    "timeout",
)
_CONTAINER = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_JSON = ContentSettings(content_type="application/json")
_REFUSED_CREDENTIALS = (
    "the service refused the credentials; check the connection string's account key, the SAS"
    " token, or the identity's role on the container"
)
_CREATE_ATTEMPTS = 3  # a create meets an expired blob, or one deleted meanwhile, this often
_NO_RETRY: dict[str, Any] = {"retry_total": 0}  # a resent conditional request could misreport


def _code(exc: HttpResponseError) -> object:
    """The storage error code the SDK attaches to its HTTP errors (None if the body had none)."""
    return getattr(exc, "error_code", None)


def _describe(exc: BaseException) -> str:
    """An SDK error as quoted in ours: its storage error code (or HTTP status), first line."""
    if not isinstance(exc, HttpResponseError):
        return first_line(exc)
    code = getattr(_code(exc), "value", _code(exc)) or exc.status_code
    return f"{code}: {first_line(exc)}"


def _has_code(code: object) -> Callable[[HttpResponseError], bool]:
    return lambda exc: _code(exc) == code


_ERRORS = ErrorMap(
    [
        Rule(ClientAuthenticationError, Meaning.REFUSED, says=_REFUSED_CREDENTIALS),
        Rule(
            HttpResponseError,
            Meaning.REFUSED,
            lambda exc: exc.status_code in (401, 403),
            _REFUSED_CREDENTIALS,
        ),
        Rule(
            HttpResponseError,
            Meaning.REFUSED,
            _has_code(StorageErrorCode.container_not_found),
            "the container does not exist (create_container=False)",
        ),
        Rule(HttpResponseError, Meaning.MODIFIED, _has_code(StorageErrorCode.condition_not_met)),
        Rule(HttpResponseError, Meaning.MISSING, _has_code(StorageErrorCode.blob_not_found)),
        Rule(HttpResponseError, Meaning.EXISTS, _has_code(StorageErrorCode.blob_already_exists)),
        Rule((AzureError, OSError, asyncio.TimeoutError), Meaning.UNAVAILABLE),
    ],
    describe=_describe,
)
"""What azure-storage-blob's, aiohttp's and the socket's errors mean."""


class BlobStorage(Storage):
    """Documents as blobs in one container, written with HTTP preconditions on their ETags.

    Give a `connection_string`, or an `account_url` with a `credential` (an account key, a
    SAS, or an async azure-identity credential), or use `from_url`. The container is created
    on first use unless `create_container=False`. Requests time out after `timeout` seconds;
    reads are retried once, writes never (a resent conditional write could report a
    conflict with itself). `client_options` go to `BlobServiceClient` as is.
    """

    atomic_batches = False
    atomic_groups = False

    def __init__(
        self,
        container: str,
        *,
        connection_string: str | None = None,
        account_url: str | None = None,
        credential: Any = None,
        write_group: WriteGroup | None = None,
        max_document_bytes: int | None = None,
        create_container: bool = True,
        max_concurrency: int = DEFAULT_CONCURRENCY,
        timeout: float = DEFAULT_TIMEOUT,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        if not isinstance(container, str) or not _CONTAINER.fullmatch(container):
            raise StorageConfigError(
                f"{container!r} is not a blob container name (3-63 of a-z 0-9 and single '-',"
                " starting and ending with a letter or digit)"
            )
        if (connection_string is None) == (account_url is None):
            raise StorageConfigError("BlobStorage needs either connection_string or account_url")
        if connection_string is not None and credential is not None:
            raise StorageConfigError(
                "credential goes with account_url (a connection string has one)"
            )
        self.max_concurrency = count("max_concurrency", max_concurrency)
        options: dict[str, Any] = {
            "connection_timeout": seconds("timeout", timeout),
            "read_timeout": seconds("timeout", timeout),
            "retry_policy": LinearRetry(backoff=1, retry_total=1, random_jitter_range=1),
            **(client_options or {}),
        }
        try:
            if connection_string is not None:
                self.service = BlobServiceClient.from_connection_string(
                    connection_string, **options
                )
            else:
                self.service = BlobServiceClient(str(account_url), credential=credential, **options)
        except (ValueError, TypeError) as exc:
            raise StorageConfigError(f"cannot configure Azure Blob Storage: {exc}") from exc
        self.container = self.service.get_container_client(container)
        self._container_ready = not create_container
        self._blobs: dict[str, BlobClient] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> BlobStorage:
        """Open `azure-blob://CONTAINER[?option=value&...]`.

        Options: `account_url`, `connection_string_env` (the variable holding the connection
        string, default `AZURE_STORAGE_CONNECTION_STRING`), `create_container`,
        `max_concurrency`, `timeout`. Keyword `options` go to the constructor and win.
        """
        parts = urlsplit(url)
        if parts.scheme.lower() != "azure-blob" or not parts.netloc or parts.path not in ("", "/"):
            raise StorageConfigError(
                f"blob storage URL must be azure-blob://CONTAINER, got {url!r}"
            )
        query = UrlOptions("azure-blob", parts.query, _URL_OPTIONS)
        read = {
            "create_container": query.flag("create_container"),
            "max_concurrency": query.count("max_concurrency"),
            "timeout": query.seconds("timeout"),
        }
        settings: dict[str, Any] = {
            name: value for name, value in read.items() if value is not None
        }
        if not {"connection_string", "account_url"} & set(options):
            account_url = query.text("account_url")
            if account_url is not None:
                settings["account_url"] = account_url
            else:
                settings["connection_string"] = _connection_string(
                    query.text("connection_string_env") or CONNECTION_STRING_ENV
                )
        return cls(unquote(parts.netloc), **{**settings, **options})

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        await self._ensure_container()
        limit = asyncio.Semaphore(self.max_concurrency)
        items = await gather_all([self._read_one(key, limit) for key in keys])
        return {key: item for key, item in zip(keys, items, strict=True) if item is not None}

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        await self._ensure_container()
        now = self.clock.time()
        limit = asyncio.Semaphore(self.max_concurrency)
        await gather_all(
            [self._write_one(w, _expiry_after(w.ttl, now), outcomes, limit) for w in writes]
        )

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        await self._ensure_container()
        limit = asyncio.Semaphore(self.max_concurrency)
        await gather_all(
            [self._delete_one(key, if_match.get(key), outcomes, limit) for key in keys]
        )

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        start = list_prefix(prefix)
        if start is None:
            return
        with self._mapped("list"):
            await self._ensure_container()
            listing = self.container.list_blobs(
                name_starts_with=start or None, include=["metadata"]
            )
            async for blob in listing:
                if expired(_expiry(blob), self.clock.time()):  # the sweep: no native expiry
                    await self._remove_expired(self.container.get_blob_client(blob.name), blob.etag)
                    continue
                key = await self._listed_key(blob)
                if key is not None and key.startswith(prefix):
                    yield key

    async def _close(self) -> None:
        with self._mapped("close"):
            await self.service.close()

    async def _ensure_container(self) -> None:
        """Create the container on first use (once it succeeded; an existing one is fine)."""
        if self._container_ready:
            return
        with self._mapped("create container"), contextlib.suppress(ResourceExistsError):
            await self.container.create_container()
        self._container_ready = True

    async def _read_one(self, key: str, limit: asyncio.Semaphore) -> StoreItem | None:
        blob = self._blob(key)
        async with limit:
            with self._mapped("read"):
                try:
                    download = await blob.download_blob()
                    raw = await download.readall()
                except ResourceNotFoundError as exc:
                    if _ERRORS.meaning(exc) is not Meaning.MISSING:
                        raise
                    return None
                envelope = unwrap(key, raw)
                etag = download.properties.etag
                now = self.clock.time()
                if expired(envelope.expires_at, now):
                    await self._remove_expired(blob, etag)
                    return None
        ttl = remaining(envelope.expires_at, now)
        return StoreItem(envelope.data, etag, envelope.raw_data, ttl)

    async def _write_one(
        self,
        write: PreparedWrite,
        expires_at: float | None,
        outcomes: Outcomes,
        limit: asyncio.Semaphore,
    ) -> None:
        blob = self._blob(write.key)
        body = wrap(write.key, write.data, expires_at=expires_at)
        metadata = {EXPIRES_METADATA: repr(expires_at)} if expires_at is not None else {}
        async with limit:
            with self._mapped("write"):
                if write.expected == ANY:
                    outcomes[write.key] = await _upload(blob, body, metadata, overwrite=True)
                elif write.expected is not None:
                    outcomes[write.key] = await _replace(blob, body, metadata, write.expected)
                else:
                    outcomes[write.key] = await _create(blob, body, metadata, self.clock)

    async def _delete_one(
        self, key: str, expected: str | None, outcomes: Outcomes, limit: asyncio.Semaphore
    ) -> None:
        blob = self._blob(key)
        async with limit:
            with self._mapped("delete"):
                try:
                    if expected is None:
                        await blob.delete_blob(delete_snapshots="include")
                    else:
                        await blob.delete_blob(
                            delete_snapshots="include",
                            etag=expected,
                            match_condition=MatchConditions.IfNotModified,
                            **_NO_RETRY,
                        )
                except (ResourceNotFoundError, ResourceModifiedError) as exc:
                    if not _lost_race(exc):
                        raise
                    if expected is not None:
                        outcomes[key] = CONFLICT

    async def _remove_expired(self, blob: BlobClient, etag: str) -> None:
        """Delete an expired blob unless it was rewritten since it was read (its etag moved)."""
        try:
            await blob.delete_blob(
                delete_snapshots="include", etag=etag, match_condition=MatchConditions.IfNotModified
            )
        except (ResourceNotFoundError, ResourceModifiedError) as exc:
            if not _lost_race(exc):
                raise

    async def _listed_key(self, blob: BlobProperties) -> str | None:
        """The key a listed blob holds: decoded from its name, or read from its envelope."""
        name = str(blob.name)
        if not is_hashed(name):
            return key_for_name(name)
        try:
            raw = await (await self.container.download_blob(name)).readall()
        except ResourceNotFoundError as exc:
            if _ERRORS.meaning(exc) is not Meaning.MISSING:
                raise
            return None  # deleted since it was listed
        head = parse_head(raw)
        key = head.key if head is not None else None
        return key if key is not None and blob_name(key) == name else None

    def _blob(self, key: str) -> BlobClient:
        """The SDK client of a key's blob, from a small LRU cache (building one costs ~0.5 ms)."""
        name = blob_name(key)
        blob = self._blobs.pop(name, None) or self.container.get_blob_client(name)
        self._blobs[name] = blob  # most recently used last
        if len(self._blobs) > CLIENT_CACHE_SIZE:
            del self._blobs[next(iter(self._blobs))]
        return blob

    def _mapped(self, action: str) -> unavailable:
        """The context of a call: SDK and network failures mapped by `_ERRORS`."""
        return unavailable(
            f"Azure Blob {action} in container {self.container.container_name!r} failed", _ERRORS
        )


async def _upload(blob: BlobClient, body: bytes, metadata: dict[str, str], **kwargs: Any) -> str:
    """PUT the blob (with the given conditions); its new ETag."""
    result = await blob.upload_blob(
        body, metadata=metadata, content_settings=_JSON, **_NO_RETRY, **kwargs
    )
    return str(result["etag"])


async def _replace(
    blob: BlobClient, body: bytes, metadata: dict[str, str], etag: str
) -> str | _Conflict:
    """PUT with If-Match: the new ETag, or CONFLICT if the blob moved on or is gone."""
    try:
        return await _upload(
            blob,
            body,
            metadata,
            overwrite=True,
            etag=etag,
            match_condition=MatchConditions.IfNotModified,
        )
    except (ResourceNotFoundError, ResourceModifiedError) as exc:
        if not _lost_race(exc):
            raise
        return CONFLICT


async def _create(
    blob: BlobClient, body: bytes, metadata: dict[str, str], clock: Clock
) -> str | _Conflict:
    """PUT with If-None-Match: *; a blob in the way that expired on `clock` is replaced on its
    ETag."""
    for _ in range(_CREATE_ATTEMPTS):
        try:
            return await _upload(blob, body, metadata, overwrite=False)
        except ResourceExistsError as exc:
            if _ERRORS.meaning(exc) is not Meaning.EXISTS:
                raise
        try:
            current = await blob.get_blob_properties()
        except ResourceNotFoundError as exc:
            if _ERRORS.meaning(exc) is not Meaning.MISSING:
                raise
            continue  # deleted meanwhile: create again
        if not expired(_expiry(current), clock.time()):
            return CONFLICT
        outcome = await _replace(blob, body, metadata, str(current.etag))
        if outcome is not CONFLICT:
            return outcome
    return CONFLICT


def _lost_race(exc: HttpResponseError) -> bool:
    """A 412 on an ETag condition or a 404 of the blob: the precondition does not hold."""
    return _ERRORS.meaning(exc) in (Meaning.MODIFIED, Meaning.MISSING)


def _expiry(blob: BlobProperties) -> float | None:
    """The expiry a blob's metadata records (None: none, or not one this backend wrote)."""
    value = (blob.metadata or {}).get(EXPIRES_METADATA)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _expiry_after(ttl: float | None, now: float) -> float | None:
    return now + ttl if ttl is not None else None


def _connection_string(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        raise StorageConfigError(
            f"azure-blob:// needs a connection string in ${variable} "
            "(or pass connection_string=, or account_url= with credential=)"
        )
    return value
