"""`export`, `import`, `forget-user` and `import-m365` run as a user runs them, against a file
store, Redis and Azurite: a backup restored into a fresh store, a user forgotten, one-line
errors for an unknown user and a half-finished export."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
from azure.storage.blob import ContainerClient
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState
from microsoft_agents.storage.blob import BlobStorage as M365BlobStorage
from microsoft_agents.storage.blob import BlobStorageConfig

from agent_state import open_storage
from tests.bridges.test_m365_import import env
from tests.cli.support import cli, one_line_error
from tests.lifecycle.support import CHANNEL, activity, application, leftovers
from tests.stores import STORES


@pytest.fixture(params=["file", "redis", "blob"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def seed(url: str) -> None:
    async with open_storage(url) as storage:
        app = application(storage)
        await app.process(activity("ada.l", "c1", "ada-secret"))
        await app.process(activity("bob", "c1", "bob-said"))


async def documents(url: str) -> dict[str, object]:
    async with open_storage(url) as storage:
        keys = [key async for key in storage.list("")]
        return {key: item.value for key, item in (await storage.read(keys)).items()}


def test_export_then_import_restores_every_document(backend: str, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source, target = STORES[backend](str(tmp_path / "a")), STORES[backend](str(tmp_path / "b"))
    asyncio.run(seed(source))
    backup = tmp_path / "backup.jsonl"
    exported = cli("export", str(backup), store=source)
    assert exported.returncode == 0, exported.stderr
    count = len(asyncio.run(documents(source)))
    assert exported.stdout.strip() == f"exported {count} documents to {backup}"
    assert not (tmp_path / "backup.jsonl.partial").exists()
    imported = cli("import", str(backup), store=target)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(f"imported {count} documents; 0 already present")
    assert asyncio.run(documents(target)) == asyncio.run(documents(source))
    again = cli("import", str(backup), store=target)
    assert again.stdout.startswith(f"imported 0 documents; {count} already present")


def test_a_half_finished_export_is_refused_in_one_line(tmp_path: Path) -> None:
    store = STORES["file"](str(tmp_path))
    asyncio.run(seed(store))
    backup = tmp_path / "backup.jsonl"
    assert cli("export", str(backup), store=store).returncode == 0
    backup.write_bytes(b"".join(backup.read_bytes().splitlines(keepends=True)[:-1]))
    error = one_line_error(cli("import", str(backup), store=STORES["file"](str(tmp_path / "x"))))
    assert "is not a complete agent-state export" in error and "no end line" in error


def test_forget_user_deletes_the_user_and_reports_an_unknown_one(
    backend: str, tmp_path: Path
) -> None:
    store = STORES[backend](str(tmp_path))
    asyncio.run(seed(store))
    result = cli("forget-user", "--channel", CHANNEL, "--user", "ada.l", store=store)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("forgot user 'ada.l' on channel 't': deleted ")

    async def left() -> list[str]:
        async with open_storage(store) as storage:
            return await leftovers(storage, "ada.l", ["ada-secret"])

    assert asyncio.run(left()) == []
    assert any("bob" in key for key in asyncio.run(documents(store)))
    error = one_line_error(cli("forget-user", "--channel", CHANNEL, "--user", "ada.l", store=store))
    assert "nothing is stored about user 'ada.l' on channel 't'" in error


def test_import_m365_moves_blobs_written_by_m365(tmp_path: Path) -> None:
    connection = env("AGENT_STATE_AZURITE_CONNECTION_STRING", "Azurite")
    name = f"m365-{uuid.uuid4().hex[:12]}"
    theirs = M365BlobStorage(BlobStorageConfig(container_name=name, connection_string=connection))
    asyncio.run(theirs.write({"msteams/users/29:ada": CachedAgentState(cast(Any, {"visits": 2}))}))
    container = ContainerClient.from_connection_string(connection, name)
    try:
        container.upload_blob("broken", b"{not json")
        store = STORES["file"](str(tmp_path))
        environment = {"M365_BLOBS": connection}
        args = ("import-m365", "--blob-container", name, "--connection-string-env", "M365_BLOBS")
        first = cli(*args, store=store, env=environment)
        assert first.returncode == 1  # one blob refused
        assert first.stdout.strip() == "moved 1, already there 0, differing (kept) 0, refused 1"
        assert "refused broken: " in first.stderr
        again = cli(*args, store=store, env=environment)
        assert again.stdout.startswith("moved 0, already there 1")
    finally:
        container.delete_container()
