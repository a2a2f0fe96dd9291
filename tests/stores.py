"""URLs of a fresh store on every backend, for tests that open stores by URL (and pass them
to other processes): files in a temporary folder, and the servers the README's test command
starts. A backend whose server is not configured skips (or fails, with servers required)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

from tests.conftest import server_missing


def _env(name: str, what: str) -> str:
    value = os.environ.get(name)
    if not value:
        server_missing(f"{what} (${name} is not set)")
    return str(value)


def _memory(tmp: str) -> str:
    return "memory://"


def _file(tmp: str) -> str:
    return f"file://{tmp}/store"


def _redis(tmp: str) -> str:
    return f"{_env('AGENT_STATE_REDIS_URL', 'Redis')}?namespace=t-{uuid.uuid4().hex[:8]}"


def _cluster(tmp: str) -> str:
    url = _env("AGENT_STATE_REDIS_CLUSTER_URL", "a Redis cluster")
    return f"{url}?cluster=true&namespace=t-{uuid.uuid4().hex[:8]}"


def _blob(tmp: str) -> str:
    _env("AGENT_STATE_AZURITE_CONNECTION_STRING", "Azurite")
    container = f"t-{uuid.uuid4().hex[:12]}"
    # a request may wait on an emulator shared by three test workers on two cores: 20 s, not
    # the product's 3 s (test_blob_storage.py checks the timeout itself, on a private server)
    env = "AGENT_STATE_AZURITE_CONNECTION_STRING"
    return f"azure-blob://{container}?connection_string_env={env}&timeout=20"


def _cosmos(tmp: str) -> str:
    endpoint = _env("AGENT_STATE_COSMOS_ENDPOINT", "the Cosmos DB emulator")
    os.environ.setdefault("AZURE_COSMOS_ENDPOINT", endpoint)
    os.environ.setdefault("AZURE_COSMOS_KEY", _env("AGENT_STATE_COSMOS_KEY", "its key"))
    return f"cosmos://tests/t{uuid.uuid4().hex[:12]}?create=true"


STORES: dict[str, Callable[[str], str]] = {
    "memory": _memory,
    "file": _file,
    "redis": _redis,
    "redis-cluster": _cluster,
    "blob": _blob,
    "cosmos": _cosmos,
}
"""Backend name -> the URL of a fresh store, given a temporary folder."""
SHARED = [name for name in STORES if name != "memory"]
"""The backends several processes can share."""
