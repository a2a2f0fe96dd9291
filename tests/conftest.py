"""Shared test setup: the servers-required switch."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

SERVERS_REQUIRED = os.environ.get("AGENT_STATE_REQUIRE_SERVERS") == "1"


def server_missing(what: str) -> NoReturn:
    """Fail when the test script promised servers; skip in an ad-hoc local run without them."""
    message = f"{what} is not available (the README's test command starts it)"
    if SERVERS_REQUIRED:
        pytest.fail(message)
    pytest.skip(message)
