"""Commands straight over a connection of a plain redis-py client's pool, in one write.

What `Redis.execute_command` (or a pipeline) does for the storage's commands (a read's
transaction, a script call per batch), without the per-call layers that cost client time on
every turn and that it does not need: retries (off: a resent script could apply a write
twice), redis-py's own metrics, the task its send starts to time a write out, and its
general argument packing. The pool, the connection's timeouts, health checks and reply
parsing stay redis-py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Connection, ConnectionPool
from redis.exceptions import ResponseError


async def call(pool: ConnectionPool, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Send `commands` on one of `pool`'s connections in one write; their replies in order,
    an error reply as its `ResponseError`.

    The connection drops itself on any failure mid-way (redis-py's rule, which `send`
    keeps), so it never returns to the pool holding an unread reply.
    """
    take: Callable[[], Awaitable[Connection]] = pool.get_connection  # untyped in redis-py
    connection = await take()
    try:
        await send(connection, b"".join(map(packed, commands)))
        replies = []
        for _ in commands:  # every reply is read, error replies too
            try:
                replies.append(await connection.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies
    finally:
        await pool.release(connection)


def packed(command: tuple[Any, ...]) -> bytes:
    """`command` in the Redis protocol, as redis-py's `pack_command` writes it for the
    storage's commands: a name and arguments that are bytes, ASCII text or ints.

    A third of `pack_command`'s cost, which encodes each argument through its encoder's type
    checks and joins the request once per argument.
    """
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        data = argument if type(argument) is bytes else str(argument).encode()
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


async def send(connection: Connection, request: bytes) -> None:
    """Write a request to a connection the pool made ready, as redis-py's
    `send_packed_command` does but without the task its write timeout starts on every call
    (two more turns of the event loop: a lone read's largest client cost after the socket
    itself). The socket takes a request at once unless its buffer is full; only then does
    this wait, at most the connection's `socket_timeout`. A lost connection shows when the
    reply is read. On any failure here the connection drops itself, as in redis-py's send.
    """
    check_health: Callable[[], Awaitable[None]] = connection.check_health  # untyped in redis-py
    try:
        await check_health()  # a PING first, if the client asked for health checks
        writer = getattr(connection, "_writer", None)  # redis-py's own stream, if it has one
        if writer is None:  # not connected, or a redis-py that keeps it elsewhere: its send
            await connection.send_packed_command(request, check_health=False)
            return
        writer.write(request)
        if writer.transport.get_write_buffer_size():
            await asyncio.wait_for(writer.drain(), connection.socket_timeout)
    except BaseException:
        await connection.disconnect(nowait=True)
        raise
