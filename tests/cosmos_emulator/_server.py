"""Running the emulator: in this process on a free port (per test), or as a script."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator

from aiohttp import web

from ._auth import MASTER_KEY
from ._routes import create_app


@contextlib.asynccontextmanager
async def running(
    host: str = "127.0.0.1", port: int = 0, key: str = MASTER_KEY
) -> AsyncIterator[str]:
    """Serve a fresh emulator on `host:port` (0: a free port) while inside; yields its URL."""
    runner = web.AppRunner(create_app(key), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[attr-defined]
    bound = next(s.getsockname()[1] for s in sockets if s.family == socket.AF_INET)
    try:
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()


def serve(host: str, port: int, key: str = MASTER_KEY) -> None:
    """Serve until SIGINT or SIGTERM (for `python -m tests.cosmos_emulator`)."""
    web.run_app(create_app(key), host=host, port=port, access_log=None, print=None)
