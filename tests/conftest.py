"""Shared test setup: the repository root on sys.path and the servers-required switch."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SERVERS_REQUIRED = os.environ.get("AGENT_STATE_REQUIRE_SERVERS") == "1"


def server_missing(what: str) -> None:
    """Fail when the test script promised servers; skip in an ad-hoc local run without them."""
    message = f"{what} is not available (the README's test command starts it)"
    if SERVERS_REQUIRED:
        pytest.fail(message)
    pytest.skip(message)
