"""The storage contract suite on CosmosStorage, over HTTP against the project's emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent_state.backends.testing import Harness, StorageContract
from tests.backends.conformance.harness_cosmos import emulator_harness


class TestCosmosContract(StorageContract):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        async for harness in emulator_harness():
            yield harness
