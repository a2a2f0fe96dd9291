"""`agent-state migrate` over 10,000 stored users, on a file store, Redis and Azurite."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_state import conversation_key, open_storage, user_key
from agent_state.backends import BlobStorage
from tests.backends.conformance.harness_blob import delete_container
from tests.stores import STORES

from .support import cli, seed, stored

USERS = {"file": 10_000, "redis": 10_000, "blob": 1_000}
"""Stored users per backend. Azurite's in-memory store finds a blob by scanning every blob
of the account (its index on the account name matches them all), so each request costs in
proportion to all blobs stored: 10,000 more made the shared Azurite too slow for everyone's
tests on this 2-core machine (the same run passes, only slower, on a private one)."""


def old_profile(number: int) -> dict[str, Any]:
    return {"full_name": f"user {number}", "visits": number % 7}


@pytest.fixture(params=list(USERS))
async def big_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, int]]:
    """A fresh store on each backend; on a server it is emptied after the test (the servers
    are shared: 10,000 documents left behind would slow everyone's tests down)."""
    url = STORES[request.param](str(tmp_path))
    yield url, USERS[request.param]
    if request.param == "file":
        return  # in tmp_path
    async with open_storage(url) as storage:
        if isinstance(storage, BlobStorage):
            await delete_container(storage)
            return
        keys = [key async for key in storage.list("")]
        for start in range(0, len(keys), 500):
            await storage.delete(keys[start : start + 500])


async def test_every_user_is_migrated_once(big_store: tuple[str, int]) -> None:
    url, count = big_store
    users = {user_key("msteams", f"29:u{n}"): old_profile(n) for n in range(count)}
    others = {conversation_key("msteams", "19:c"): {"full_name": "not a user"}}
    await seed(url, {**users, **others})

    first = cli("migrate", "--scope", "tests.cli.scopes:Profile", "--json", store=url)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "dry_run": False, "migrated": count, "already_current": 0, "refused": []
    }  # fmt: skip
    documents = await stored(url, [*users, *others])
    for number, key in enumerate(users):
        assert documents[key] == {"_schema": 2, "name": f"user {number}", "visits": number % 7}
    assert documents[conversation_key("msteams", "19:c")] == {"full_name": "not a user"}

    second = cli("migrate", "--scope", "tests.cli.scopes:Profile", "--json", store=url)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {
        "dry_run": False, "migrated": 0, "already_current": count, "refused": []
    }  # fmt: skip


async def test_refusals_dry_run_and_a_resumed_run(tmp_path: Path) -> None:
    url = STORES["file"](str(tmp_path))
    documents = {
        user_key("t", "old"): old_profile(1),
        user_key("t", "current"): {"_schema": 2, "name": "n", "visits": 1},
        user_key("t", "invalid"): {"full_name": 5},
        user_key("t", "newer"): {"_schema": 3, "name": "n"},
    }
    await seed(url, documents)
    dry = cli("migrate", "--scope", "tests.cli.scopes:Profile", "--dry-run", "--json", store=url)
    summary = json.loads(dry.stdout)
    assert dry.returncode == 1 and (summary["migrated"], summary["already_current"]) == (1, 1)
    assert await stored(url, list(documents)) == documents  # a dry run writes nothing
    reasons = {entry["key"]: entry["reason"] for entry in summary["refused"]}
    assert set(reasons) == {user_key("t", "invalid"), user_key("t", "newer")}
    assert "name" in reasons[user_key("t", "invalid")]
    assert "version 3 is newer" in reasons[user_key("t", "newer")]

    run = cli("migrate", "--scope", "tests.cli.scopes:Profile", store=url)  # pretty output
    assert run.returncode == 1 and json.loads(run.stdout)["migrated"] == 1
    again = cli("migrate", "--scope", "tests.cli.scopes:Profile", "--json", store=url)
    assert (json.loads(again.stdout)["migrated"], json.loads(again.stdout)["already_current"]) == (
        0, 2
    )  # fmt: skip


def test_a_scope_that_cannot_be_migrated_is_one_line(tmp_path: Path) -> None:
    url = STORES["file"](str(tmp_path))
    for scope, says in [
        ("tests.cli.scopes:Untyped", "has no schema_version"),
        ("tests.cli.nothing:Profile", "cannot load --scope"),
        ("tests.cli.scopes:ProfileModel", "is not an AgentState subclass"),
        ("no-colon", "give MODULE:CLASS"),
    ]:
        assert says in cli("migrate", "--scope", scope, store=url).stderr
