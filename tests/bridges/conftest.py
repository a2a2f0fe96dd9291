"""A fresh store on every backend for the bridges' tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent_state import open_storage
from agent_state.backends import Storage
from tests.stores import STORES


@pytest.fixture(params=list(STORES))
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    store = open_storage(STORES[request.param](str(tmp_path)))
    yield store
    await store.close()
