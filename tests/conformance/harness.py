"""What the conformance suite needs from each backend under test, beyond the contract."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from agent_state.backends._base import Storage


@dataclass
class Harness:
    """A fresh, empty store plus raw access to it.

    `put_raw`/`get_raw` store and fetch envelope bytes as the backend keeps them, so tests
    can plant unknown formats; `open_another` gives a second client of the same store.
    """

    storage: Storage
    put_raw: Callable[[str, bytes], Awaitable[None]]
    get_raw: Callable[[str], Awaitable[bytes | None]]
    open_another: Callable[[], Awaitable[Storage]]


HarnessFactory = Callable[[], AsyncIterator[Harness]]
