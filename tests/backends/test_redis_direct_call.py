"""A lone command of a plain Redis client goes straight over a pooled connection: a call
cancelled at any point gives the connection back, and never leaves a reply on it for the
next call (one connection in the pool, so a kept one would make every next call wait); its
request is packed byte for byte as redis-py packs it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Connection

from agent_state import open_storage
from agent_state.backends import RedisStorage, StoreItem
from agent_state.backends.redis.direct import packed, send
from tests.backends.conformance.harness_redis import STANDALONE_URL, remove_namespace
from tests.conftest import server_missing


@pytest.fixture
async def one_connection() -> AsyncIterator[RedisStorage]:
    """A storage whose pool has one connection, so every call reuses it."""
    url = os.environ.get(STANDALONE_URL)
    if not url:
        server_missing(f"Redis (${STANDALONE_URL} is not set)")
    storage = open_storage(url, namespace=uuid.uuid4().hex, pool_size=1)
    assert isinstance(storage, RedisStorage)
    yield storage
    await remove_namespace(storage)
    await storage.close()


async def test_a_cancelled_call_gives_its_connection_back_with_no_reply_left_on_it(
    one_connection: RedisStorage,
) -> None:
    storage = one_connection
    keys = ["app/one", "app/two"]
    await storage.write({key: StoreItem({"name": key}, None) for key in keys})
    cancelled = 0
    for attempt in range(60):
        key, other = keys[attempt % 2], keys[1 - attempt % 2]
        call = asyncio.create_task(storage.read([key]))
        for _ in range(attempt % 6):  # cancel it at a different step each time
            await asyncio.sleep(0)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        cancelled += call.cancelled()
        found = await storage.read([other])  # the same connection (or a fresh one)
        assert found[other].value == {"name": other}
    assert cancelled > 0  # some calls were cut off mid-way, not only before they began


async def test_a_request_larger_than_the_socket_takes_at_once_is_written_whole(
    one_connection: RedisStorage,
) -> None:
    """The direct write waits for the socket only when its buffer is full: 8 MB is more than
    a loopback socket takes at once."""
    big = {"text": "x" * (8 * 1024 * 1024)}
    await one_connection.write({"app/big": StoreItem(big)})
    assert (await one_connection.read(["app/big"]))["app/big"].value == big


@pytest.mark.parametrize(
    "command",
    [
        ("EVALSHA", b"0" * 40, 2, b"ns:{c/users/a}", b"ns:{c/users/b}"),
        ("EVALSHA", b"1" * 40, 1, b"{k}", "1", "", "1500", b'{"v":1,"data":{"t":"\\u00e9"}}'),
        ("EVAL", "return 1", 0),
        ("EVALSHA", b"2" * 40, 1, b"{k}", "*", "check", b""),
    ],
)
def test_a_request_is_packed_as_redis_py_packs_it(command: tuple[str | bytes | int, ...]) -> None:
    assert packed(command) == b"".join(Connection().pack_command(*command))


async def test_a_connection_without_its_stream_is_sent_through_redis_pys_own_send(
    one_connection: RedisStorage,
) -> None:
    """A pooled connection holding no stream (not connected, or a redis-py that keeps it
    elsewhere) is written through redis-py's `send_packed_command`, which connects it."""
    pool = one_connection._pool
    assert pool is not None
    connection = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.disconnect()
        assert getattr(connection, "_writer", None) is None
        await send(connection, packed(("PING",)))
        assert await connection.read_response() in (b"PONG", "PONG", True)
    finally:
        await pool.release(connection)
