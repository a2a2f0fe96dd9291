"""Redis storage (standalone or cluster) on `redis.asyncio`: one round trip per batch.

A read is one MGET, a write or delete one Lua script, per cluster slot (one in all on a
standalone server); several go in one pipeline. Layout, versions and options: docs/redis.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import NoScriptError, RedisClusterException, RedisError, ResponseError

from ._base import (
    ANY,
    CONFLICT,
    Outcomes,
    PreparedWrite,
    Storage,
    StoreItem,
    WriteGroup,
    unavailable,
)
from ._envelope import unwrap, wrap
from ._errors import FormatError, StorageConfigError, StorageUnavailableError
from ._redis_layout import KeyLayout
from ._redis_scripts import DELETE, WRITE, LuaScript, split_stored

DEFAULT_TIMEOUT = 5.0
"""Seconds to connect or to wait for a reply before a call fails with StorageUnavailableError."""

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_SCAN_COUNT = 1000
_UNAVAILABLE = (RedisError, RedisClusterException, OSError, asyncio.TimeoutError)

RedisClient = Redis | RedisCluster


class RedisStorage(Storage):
    """Documents in Redis strings, written by server-side scripts that check versions first.

    Pass a `Redis` or `RedisCluster` client (it stays yours: `close` leaves it open unless
    `owns_client`; turn its retries off, see docs/redis.md), or use `from_url`. On a
    standalone server a write batch is all-or-nothing (`atomic_batches`); on a cluster each
    key is written on its own, as in `MemoryStorage`.
    """

    max_ttl_seconds = 9e15
    """Redis keeps an expiry as a signed 64-bit Unix time in ms: about 285 million years."""

    def __init__(
        self,
        client: RedisClient,
        *,
        namespace: str | None = None,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
        owns_client: bool = False,
    ) -> None:
        if not isinstance(client, (Redis, RedisCluster)):
            raise StorageConfigError("RedisStorage needs a redis.asyncio Redis or RedisCluster")
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self.atomic_batches = not self.cluster
        self.atomic_groups = True
        self.layout = KeyLayout(self.group_of, namespace)
        self._owns_client = owns_client

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        cluster: bool | None = None,
        timeout: float | None = None,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
        **client_options: Any,
    ) -> RedisStorage:
        """Open `redis://[user:pass@]host:port/db` or `rediss://...` (TLS).

        Query parameters `namespace`, `cluster` (true/false) and `timeout` (seconds) are ours;
        keyword arguments override them. Other query parameters and `client_options` go to
        redis-py. Nothing connects until the first call.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise StorageConfigError(f"not a redis:// or rediss:// URL: {url!r}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {name: value for name, value in query if name in ("namespace", "cluster", "timeout")}
        passed = [(name, value) for name, value in query if name not in ours]
        namespace = namespace if namespace is not None else ours.get("namespace")
        cluster = cluster if cluster is not None else _flag(ours.get("cluster", "false"))
        seconds = timeout if timeout is not None else _seconds(ours.get("timeout"))
        options: dict[str, Any] = {
            "socket_timeout": seconds,
            "socket_connect_timeout": seconds,
            "retry": Retry(NoBackoff(), 0),  # a resent script could apply a write twice
            **client_options,
        }
        factory = RedisCluster if cluster else Redis
        client_url = urlunsplit(parts._replace(query=urlencode(passed)))
        try:
            client = factory.from_url(client_url, **options)
        except (ValueError, TypeError, RedisError, RedisClusterException) as exc:
            raise StorageConfigError(f"cannot configure Redis from {url!r}: {exc}") from exc
        return cls(
            client,
            namespace=namespace,
            max_document_bytes=max_document_bytes,
            write_group=write_group,
            owns_client=True,
        )

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        groups = self._groups(keys)
        replies = await self._send([("MGET", *_redis_keys(group)) for group in groups], "read")
        found = {}
        for group, values in zip(groups, replies, strict=True):
            if isinstance(values, Exception):
                raise StorageUnavailableError(f"Redis read failed: {values}") from values
            for (key, _), value in zip(group, values, strict=True):
                if value is None:
                    continue
                stored = split_stored(value)
                if stored is None:
                    raise FormatError(key, "is not a Redis value written by agent-state")
                envelope = unwrap(key, stored[1])
                found[key] = StoreItem(envelope.data, stored[0], envelope.raw_data)
        return found

    async def _write(
        self, writes: list[PreparedWrite], ttl: float | None, outcomes: Outcomes
    ) -> None:
        ttl_ms = str(max(1, round(ttl * 1000))) if ttl is not None else "0"
        by_key = {write.key: write for write in writes}
        groups = self._groups(list(by_key))
        calls = []
        for group in groups:
            args: list[str | bytes] = ["1", ttl_ms]  # one script per slot: all-or-nothing
            for key, _ in group:
                write = by_key[key]
                args += ["" if write.expected is None else write.expected, wrap(key, write.data)]
            calls.append((_redis_keys(group), args))
        replies = await self._run(WRITE, calls)
        for group, reply in zip(groups, replies, strict=True):
            if isinstance(reply, Exception):
                continue
            for (key, _), outcome in zip(group, reply, strict=True):
                if isinstance(outcome, (bytes, str)):
                    outcomes[key] = _text(outcome)
                elif outcome == 0:
                    outcomes[key] = CONFLICT
        _raise_first_error(replies, "write")  # after recording what the other slots wrote

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        groups = self._groups(keys)
        calls = [
            (_redis_keys(group), [if_match.get(key, ANY) for key, _ in group]) for group in groups
        ]
        replies = await self._run(DELETE, calls)
        _raise_first_error(replies, "delete")
        for group, reply in zip(groups, replies, strict=True):
            for position in reply:
                outcomes[group[position - 1][0]] = CONFLICT

    async def _list(self, prefix: str) -> AsyncIterator[str]:
        seen: set[str] = set()  # SCAN may return a key twice
        with _unavailable("list"):
            await self._initialized()
            async for redis_key in self.client.scan_iter(
                match=self.layout.scan_pattern(prefix), count=_SCAN_COUNT
            ):
                key = self.layout.storage_key(redis_key)
                if key is not None and key.startswith(prefix) and key not in seen:
                    seen.add(key)
                    yield key

    async def _close(self) -> None:
        if self._owns_client:
            with _unavailable("close"):
                await self.client.aclose()

    def _groups(self, keys: list[str]) -> list[list[tuple[str, str]]]:
        """Pair keys with their Redis keys, split by cluster slot (one group if standalone)."""
        pairs = [(key, self.layout.redis_key(key)) for key in keys]
        if not self.cluster:
            return [pairs]
        by_slot: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for pair in pairs:
            by_slot[key_slot(pair[1].encode())].append(pair)
        return list(by_slot.values())

    async def _run(self, script: LuaScript, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run `script` once per (keys, args) in one round trip; load it where it is missing.

        Error replies come back in the list, for the caller to raise after the rest.
        """
        action = "write" if script is WRITE else "delete"
        replies = await self._send(
            [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls], action
        )
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # nothing ran for these: run them again with the source, which caches it
            loaded = await self._send(
                [
                    ("EVAL", script.source, len(calls[i][0]), *calls[i][0], *calls[i][1])
                    for i in missing
                ],
                action,
            )
            for i, reply in zip(missing, loaded, strict=True):
                replies[i] = reply
        return replies

    async def _initialized(self) -> None:
        """Discover a cluster's nodes before the first commands, one caller at a time.

        redis-py 8.1 resolves command policies before it initializes a fresh cluster client,
        so concurrent first calls would share half-open connections and fail.
        """
        if self.cluster:
            await self.client.initialize()

    async def _send(self, commands: list[tuple[Any, ...]], action: str) -> list[Any]:
        """Send commands in one round trip: a lone one directly (cheaper), else pipelined.

        Error replies come back in the list; connection failures raise.
        """
        with _unavailable(action):
            await self._initialized()
            if len(commands) == 1:
                try:
                    return [await self.client.execute_command(*commands[0])]
                except ResponseError as exc:
                    return [exc]
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # the cluster pipeline blocks its evalsha helper
            return await pipe.execute(raise_on_error=False)


def _unavailable(action: str) -> contextlib.AbstractContextManager[None]:
    """Turn redis-py and socket failures into `StorageUnavailableError` (cause chained)."""
    return unavailable(f"Redis {action} failed", _UNAVAILABLE)


def _raise_first_error(replies: list[Any], action: str) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise StorageUnavailableError(f"Redis {action} failed: {reply}") from reply


def _redis_keys(group: list[tuple[str, str]]) -> list[str]:
    return [redis_key for _, redis_key in group]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _flag(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise StorageConfigError(f"cluster must be true or false, got {value!r}")


def _seconds(value: str | None) -> float:
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise StorageConfigError(f"timeout must be a positive number of seconds, got {value!r}")
    return seconds
