"""Run `agent-state` as a user does (the installed console script, in its own process), and
seed or read stores through the storage API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent_state import open_storage
from agent_state.backends import StoreItem

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "agent-state"
WRITES_AT_ONCE = 100


def cli(
    *args: str,
    store: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`agent-state ARGS` with `AGENT_STATE_URL=store`, from a folder where the tests' own
    modules (`--scope tests.cli.scopes:...`) import."""
    environment = {key: value for key, value in os.environ.items() if key != "AGENT_STATE_URL"}
    environment["PYTHONPATH"] = str(ROOT)
    if store is not None:
        environment["AGENT_STATE_URL"] = store
    environment.update(env or {})
    return subprocess.run(
        [str(SCRIPT), *args], cwd=ROOT, env=environment, input=stdin, capture_output=True,
        text=True, timeout=timeout, check=False,
    )  # fmt: skip


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The error a failed run printed, checked to be one line on stderr and nothing else."""
    assert result.returncode != 0, result.stdout
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("agent-state: error: ")
    return result.stderr.strip()


async def seed(url: str, documents: Mapping[str, dict[str, Any]]) -> None:
    """Store `documents` (create-only), a batch of single-key writes at a time."""
    async with open_storage(url) as storage:
        items = list(documents.items())
        for start in range(0, len(items), WRITES_AT_ONCE):
            batch = items[start : start + WRITES_AT_ONCE]
            await asyncio.gather(*(storage.write({k: StoreItem(v, None)}) for k, v in batch))


async def stored(url: str, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The documents at `keys` (missing ones absent), read in batches."""
    found: dict[str, dict[str, Any]] = {}
    async with open_storage(url) as storage:
        for start in range(0, len(keys), 500):
            items = await storage.read(keys[start : start + 500])
            found.update({key: item.value for key, item in items.items()})
    return found
