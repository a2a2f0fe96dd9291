"""Redis storage (standalone or cluster) on `redis.asyncio`: one round trip per batch.

A write or a delete is one Lua script per cluster slot (one in all on a standalone server),
and so is a cluster's read; several go in one pipeline. A standalone server's read is one
transaction of two plain commands. Layout, versions and options: docs/redis.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import NoScriptError, RedisClusterException, RedisError, ResponseError

from .._base import Storage, WriteGroup, missing_write_group
from .._envelope import unwrap, wrap
from .._error_map import ErrorMap, Meaning, Rule, unavailable
from .._errors import FormatError, StorageConfigError, StorageUnavailableError
from .._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, remaining
from .._keys import KEYS_REMEMBERED
from .._options import UrlOptions, count, seconds
from . import direct
from .layout import KeyLayout, Place
from .scripts import DELETE, LIST, READ, WRITE, LuaScript, split_stored

DEFAULT_TIMEOUT = 5.0
"""Seconds to connect or to wait for a reply before a call fails with StorageUnavailableError."""

DEFAULT_POOL_SIZE = 50
"""Connections per server (per node of a cluster) that `from_url` lets one storage open."""

_OURS = ("namespace", "cluster", "timeout", "pool_size", "pool_timeout")
_REDIS_PY = ("protocol", "client_name", "health_check_interval")
_TLS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_check_hostname")
_CHOICES = {"protocol": ("2", "3"), "ssl_cert_reqs": ("none", "optional", "required")}
_PLAIN_REFUSED = {name: "needs a rediss:// (TLS) URL" for name in _TLS}
_DATABASE = re.compile(r"/?([0-9]*)", re.ASCII)
_SCAN_COUNT = 1000
_INDEX_PAGE = 1000
"""Index members one list step looks at."""
_ERRORS = ErrorMap(
    [Rule((RedisError, RedisClusterException, OSError, asyncio.TimeoutError), Meaning.UNAVAILABLE)],
    describe=str,
)
"""What redis-py's and the socket's errors mean: every one, that Redis is unavailable."""

RedisClient = Redis | RedisCluster


class RedisStorage(Storage):
    """Documents in Redis strings, written by server-side scripts that check versions first.

    Pass a `Redis` or `RedisCluster` client (it stays yours: `close` leaves it open unless
    `owns_client`; turn its retries off, see docs/redis.md), or use `from_url`. On a
    standalone server a write batch is all-or-nothing (`atomic_batches`); on a cluster each
    key is written on its own, as in `MemoryStorage`.

    A cluster client raises at once when a node's `max_connections` are in use, so calls on
    a cluster wait for one of that many slots, at most `pool_timeout` seconds (then
    `StorageUnavailableError`). A standalone client's pool waits by itself if it is a
    `BlockingConnectionPool`, as `from_url` makes it.
    """

    max_ttl_seconds = 9e15
    """Redis keeps an expiry as a signed 64-bit Unix time in ms: about 285 million years."""

    needs_write_group = True
    indexes_groups = True

    def __init__(
        self,
        client: RedisClient,
        *,
        namespace: str | None = None,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
        owns_client: bool = False,
        pool_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        if not isinstance(client, (Redis, RedisCluster)):
            raise StorageConfigError("RedisStorage needs a redis.asyncio Redis or RedisCluster")
        super().__init__(write_group=write_group, max_document_bytes=max_document_bytes)
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self.atomic_batches = not self.cluster
        self.atomic_groups = True
        self.layout = KeyLayout(self.group_of, namespace)
        self._place: Callable[[str], Place] = lru_cache(maxsize=KEYS_REMEMBERED)(self.layout.place)
        """`layout.place`, remembered per key, so a turn's keys are not built again."""
        self._owns_client = owns_client
        self._pool_timeout = seconds("pool_timeout", pool_timeout)
        self._slots: asyncio.Semaphore | None = None
        self._pool: ConnectionPool | None = None
        """A plain client's pool: commands go straight over one of its connections
        (`direct.call`)."""
        if type(client) is Redis and not client.single_connection_client:
            self._pool = client.connection_pool
        if isinstance(client, RedisCluster):  # one connection per node and call at most
            per_node = client.nodes_manager.connection_kwargs.get("max_connections")
            self._slots = asyncio.Semaphore(per_node or DEFAULT_POOL_SIZE)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        namespace: str | None = None,
        cluster: bool | None = None,
        timeout: float | None = None,
        pool_size: int | None = None,
        pool_timeout: float | None = None,
        max_document_bytes: int | None = None,
        write_group: WriteGroup | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> RedisStorage:
        """Open `redis://[user:pass@]host:port/db` or `rediss://...` (TLS).

        Query options: ours (`namespace`, `cluster`, `timeout`, `pool_size`, `pool_timeout`;
        a keyword argument wins over the query) and the few redis-py options docs/redis.md
        lists; anything else raises `StorageConfigError` before a client exists.
        `client_options` are redis-py keyword arguments a URL cannot carry (e.g.
        `connection_class`, `ssl_ca_data`); a name redis-py does not take is refused here too.
        Nothing connects until the first call.
        """
        if write_group is None:  # before a client exists
            raise missing_write_group(cls.__name__)
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise StorageConfigError(f"not a redis:// or rediss:// URL: {url!r}")
        tls = parts.scheme == "rediss"
        query = UrlOptions(
            parts.scheme,
            parts.query,
            _OURS + _REDIS_PY + (_TLS if tls else ()),
            refused=None if tls else _PLAIN_REFUSED,
        )
        cluster = cluster if cluster is not None else bool(query.flag("cluster"))
        database = _database(parts.path, cluster)
        reply_wait = (
            seconds("timeout", timeout) if timeout is not None else query.seconds("timeout")
        ) or DEFAULT_TIMEOUT
        size = count("pool_size", pool_size) if pool_size is not None else query.count("pool_size")
        wait = (
            seconds("pool_timeout", pool_timeout)
            if pool_timeout is not None
            else query.seconds("pool_timeout")
        ) or reply_wait
        passed_on = {
            name: value
            for name in _REDIS_PY + (_TLS if tls else ())
            if (value := query.text(name, _CHOICES.get(name))) is not None
        }
        options: dict[str, Any] = {
            "socket_timeout": reply_wait,
            "socket_connect_timeout": reply_wait,
            "retry": Retry(NoBackoff(), 0),  # a resent script could apply a write twice
            "max_connections": size or DEFAULT_POOL_SIZE,
        }
        taken = sorted(set(client_options or ()) & {*options, "timeout", "db"})
        if taken:
            raise StorageConfigError(
                f"client_options {taken} are set from the URL and the options timeout, "
                "pool_size and pool_timeout; give them there"
            )
        options.update(client_options or {})
        client_url = urlunsplit(parts._replace(path=f"/{database}", query=urlencode(passed_on)))
        client: RedisClient
        try:
            if cluster:
                client = RedisCluster.from_url(client_url, **options)
            else:  # waits up to `wait` seconds for a free connection, then raises
                pool = BlockingConnectionPool.from_url(client_url, timeout=wait, **options)
                pool.connection_class(**pool.connection_kwargs)  # no I/O: bad options fail now
                client = Redis.from_pool(pool)
        except (ValueError, TypeError, RedisError, RedisClusterException) as exc:
            raise StorageConfigError(f"cannot configure Redis from {url!r}: {exc}") from exc
        return cls(
            client,
            namespace=namespace if namespace is not None else query.text("namespace"),
            max_document_bytes=max_document_bytes,
            write_group=write_group,
            owns_client=True,
            pool_timeout=wait,
        )

    async def _read(self, keys: list[str]) -> dict[str, StoreItem]:
        groups = self._groups(keys)
        if self._pool is not None:  # a server through a pool: first as a transaction
            found = await self._read_plain(groups[0])
            if found is not None:
                return found
        replies = await self._run(READ, [(_redis_keys(group), []) for group in groups], "read")
        _raise_first_error(replies, "read")
        found = {}
        for group, values in zip(groups, replies, strict=True):
            for (key, _), value in zip(group, values, strict=True):
                if isinstance(value, list):
                    raise _wrong_type(key, value)
            found.update(_items(group, values))
        return found

    async def _read_plain(self, group: list[tuple[str, Place]]) -> dict[str, StoreItem] | None:
        """The read of a server's keys as one transaction of an `MGET` and an `EXISTS` (a
        script call costs the server several times more: Lua takes every value in and gives
        it out again); None when `EXISTS` counts more keys than `MGET` found strings, so one
        holds another Redis type, which `READ` then names."""
        redis_keys = _redis_keys(group)
        transaction = [("MULTI",), ("MGET", *redis_keys), ("EXISTS", *redis_keys), ("EXEC",)]
        replies = await self._send(transaction, "read")
        _raise_first_error(replies, "read")
        values, existing = replies[-1]
        _raise_first_error([values, existing], "read")
        if existing > len(values) - values.count(None):
            return None
        return _items(group, values)

    async def _write(self, writes: list[PreparedWrite], outcomes: Outcomes) -> None:
        by_key = {write.key: write for write in writes}
        groups = self._groups(list(by_key))
        calls, now = [], time.time()
        for group in groups:
            args: list[str | bytes] = ["1"]  # one script per slot: all-or-nothing
            for key, place in group:
                write = by_key[key]
                expected = "" if write.expected is None else write.expected
                if write.check_only:
                    args += [expected, "check", b"", b""]
                    continue
                ttl_ms = str(max(1, round(write.ttl * 1000))) if write.ttl is not None else "0"
                expires = now + write.ttl if write.ttl is not None else None
                args += [expected, ttl_ms, wrap(key, write.data, expires_at=expires), place.member]
            calls.append((_indexed_keys(group), args))
        replies = await self._run(WRITE, calls, "write")
        wrong: FormatError | None = None
        for group, reply in zip(groups, replies, strict=True):
            if isinstance(reply, Exception):
                continue
            for (key, _), outcome in zip(group, reply, strict=True):
                if isinstance(outcome, (bytes, str)):
                    outcomes[key] = _text(outcome)
                elif outcome == 0:
                    outcomes[key] = CONFLICT
                elif isinstance(outcome, list) and wrong is None:
                    wrong = _wrong_type(key, outcome)
        _raise_first_error(replies, "write")  # after recording what the other slots wrote
        if wrong is not None:
            raise wrong

    async def _delete(self, keys: list[str], if_match: dict[str, str], outcomes: Outcomes) -> None:
        groups = self._groups(keys)
        calls = [
            (
                _indexed_keys(group),
                [arg for key, place in group for arg in (if_match.get(key, ANY), place.member)],
            )
            for group in groups
        ]
        replies = await self._run(DELETE, calls, "delete")
        _raise_first_error(replies, "delete")
        for group, reply in zip(groups, replies, strict=True):
            for position in reply:
                outcomes[group[position - 1][0]] = CONFLICT

    def _list(self, prefix: str) -> AsyncIterator[str]:
        group = self._group_under(prefix)
        if group is not None:
            return self._indexed(group, prefix)
        return self._scanned(prefix)

    async def _indexed(self, group: str, prefix: str) -> AsyncIterator[str]:
        """The keys under `prefix`, all in `group`, from a range of the group's index: work in
        proportion to those keys, whatever else the store holds."""
        index, start, end = self.layout.index_range(group, prefix)
        base = self.layout.group_base(group).encode()
        while True:  # `_run` holds a connection per step: a caller may await us in between
            [reply] = await self._run(LIST, [([index], [start, end, _INDEX_PAGE])], "list")
            _raise_first_error([reply], "list")
            looked_at, last, *members = reply
            for member in members:
                key = self.layout.storage_key(base + member)
                if key is not None:
                    yield key
            if looked_at < _INDEX_PAGE:
                return
            start = b"(" + last

    async def _scanned(self, prefix: str) -> AsyncIterator[str]:
        """The keys under `prefix` by `SCAN`: a walk of the whole keyspace (of every node)."""
        seen: set[str] = set()  # SCAN may return a key twice
        with _unavailable("list"):
            redis_keys = aiter(
                self.client.scan_iter(match=self.layout.scan_pattern(prefix), count=_SCAN_COUNT)
            )
            while True:
                async with self._connection():  # per step: a caller may await us in between
                    redis_key = await anext(redis_keys, None)
                if redis_key is None:
                    return
                key = self.layout.storage_key(redis_key)
                if key is not None and key.startswith(prefix) and key not in seen:
                    seen.add(key)
                    yield key

    async def _close(self) -> None:
        if self._owns_client:
            with _unavailable("close"):
                await self.client.aclose()

    def _groups(self, keys: list[str]) -> list[list[tuple[str, Place]]]:
        """Pair keys with their places, split by cluster slot (one group if standalone)."""
        place = self._place
        pairs = [(key, place(key)) for key in keys]
        if not self.cluster:
            return [pairs]
        by_slot: dict[int, list[tuple[str, Place]]] = defaultdict(list)
        for pair in pairs:
            by_slot[key_slot(pair[1].redis_key)].append(pair)
        return list(by_slot.values())

    async def _run(
        self, script: LuaScript, calls: list[tuple[list[bytes], list[Any]]], action: str
    ) -> list[Any]:
        """Run `script` once per (keys, args) in one round trip; load it where it is missing.

        Error replies come back in the list, for the caller to raise after the rest.
        """
        replies = await self._send(
            [(*script.call, len(keys), *keys, *args) for keys, args in calls], action
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

    async def _send(self, commands: list[tuple[Any, ...]], action: str) -> list[Any]:
        """Send commands in one round trip: directly on a server (cheaper), else a lone one
        as it is and several pipelined (a cluster's client sends each to its node).

        Error replies come back in the list; connection failures raise.
        """
        with _unavailable(action):
            async with self._connection():
                if self._pool is not None:
                    return await direct.call(self._pool, commands)
                if len(commands) == 1:
                    try:
                        return [await self.client.execute_command(*commands[0])]
                    except ResponseError as exc:
                        return [exc]
                pipe = self.client.pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)  # the cluster pipeline blocks its evalsha
                return await pipe.execute(raise_on_error=False)

    def _connection(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Where a call may run: at once on a standalone server (its pool does its own
        waiting), in one of a cluster's slots (`_cluster_slot`)."""
        return _FREE if self._slots is None else self._cluster_slot(self._slots)

    @contextlib.asynccontextmanager
    async def _cluster_slot(self, slots: asyncio.Semaphore) -> AsyncIterator[None]:
        """Hold one of a cluster's `max_connections` slots (a call takes one connection per
        node), waiting at most `pool_timeout`; then discover the nodes if not done yet, one
        caller at a time: redis-py 8.1 resolves command policies before it initializes a
        fresh cluster client, so concurrent first calls would share half-open connections."""
        try:
            if slots.locked():
                await asyncio.wait_for(slots.acquire(), self._pool_timeout)
            else:
                await slots.acquire()  # free: returns without suspending
        except asyncio.TimeoutError:
            raise StorageUnavailableError(
                f"no Redis connection became free within pool_timeout={self._pool_timeout:g}s"
            ) from None
        try:
            await self.client.initialize()
            yield
        finally:
            slots.release()


_FREE = contextlib.nullcontext()
"""The context of a call on a standalone server: nothing to hold."""


def _unavailable(action: str) -> unavailable:
    """The context of a Redis call: redis-py's and the socket's errors mapped by `_ERRORS`
    (one per action, made once: it holds nothing of a call)."""
    context = _CONTEXTS.get(action)
    if context is None:
        context = _CONTEXTS[action] = unavailable(f"Redis {action} failed", _ERRORS)
    return context


_CONTEXTS: dict[str, unavailable] = {}


def _raise_first_error(replies: list[Any], action: str) -> None:
    """Raise the first error reply of a pipeline, mapped like a raised one."""
    for reply in replies:
        if isinstance(reply, Exception):
            with _unavailable(action):
                raise reply


def _items(group: list[tuple[str, Place]], values: list[bytes | None]) -> dict[str, StoreItem]:
    """The documents of a slot group's keys from their stored values (None: missing)."""
    found, now = {}, time.time()
    for (key, _), value in zip(group, values, strict=True):
        if value is None:
            continue
        stored = split_stored(value)
        if stored is None:
            raise FormatError(key, "is not a Redis value written by agent-state")
        envelope = unwrap(key, stored[1])
        ttl = remaining(envelope.expires_at, now)
        found[key] = StoreItem(envelope.data, stored[0], envelope.raw_data, ttl)
    return found


def _redis_keys(group: list[tuple[str, Place]]) -> list[bytes]:
    return [place.redis_key for _, place in group]


def _indexed_keys(group: list[tuple[str, Place]]) -> list[bytes]:
    """The group's Redis keys, then the index of each (as the write and delete scripts take)."""
    return [place.redis_key for _, place in group] + [place.index_key for _, place in group]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _wrong_type(key: str, reply: list[Any]) -> FormatError:
    kind = _text(reply[0]) if reply else "unknown"
    return FormatError(key, f"holds a Redis {kind}, not a string written by agent-state")


def _database(path: str, cluster: bool) -> int:
    """The database number in the URL's path (0 if none); a cluster has only database 0."""
    match = _DATABASE.fullmatch(path)
    if match is None:
        raise StorageConfigError(f"Redis database must be a number, got {path.lstrip('/')!r}")
    database = int(match.group(1) or 0)
    if cluster and database != 0:
        raise StorageConfigError(f"a Redis cluster has only database 0, got {database}")
    return database
