"""The library's storage contract suite on BlobStorage: Azurite always, a real account opt-in."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import pytest

from agent_state.backends.testing import Harness, StorageContract
from tests.backends.conformance.harness_blob import LIVE, azurite_harness, live_harness

HARNESSES = {"azurite": azurite_harness}
if os.environ.get(LIVE):  # the opt-in run on a real account is only collected when asked for
    HARNESSES["live-account"] = live_harness


class TestBlobContract(StorageContract):
    @pytest.fixture(params=sorted(HARNESSES))
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        factory = contextlib.asynccontextmanager(HARNESSES[request.param])
        async with factory() as harness:
            yield harness
