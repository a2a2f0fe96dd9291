"""Microsoft 365 Agents SDK bridge: our stores as an M365 `Storage`, a per-conversation turn
queue middleware, and the import of what M365's own Blob and Cosmos DB storages wrote.

Needs the `.[m365]` extra (microsoft-agents-hosting-core). See docs/m365.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from microsoft_agents.hosting.core import TurnContext
from microsoft_agents.hosting.core.state.agent_state import CachedAgentState
from microsoft_agents.hosting.core.storage import Storage as M365Storage
from microsoft_agents.hosting.core.storage import StoreItem as M365StoreItem

from .. import DELIVERED
from ..backends import ANY, ConflictError, Storage, StoreItem
from . import _reads
from ._keymap import to_storage_key
from ._m365_import import ImportReport, import_m365_blobs, import_m365_cosmos
from ._m365_values import from_document, to_document

__all__ = [
    "AgentStateStorage",
    "ImportReport",
    "TurnQueueMiddleware",
    "import_m365_blobs",
    "import_m365_cosmos",
]

ItemT = TypeVar("ItemT", bound=M365StoreItem)


class AgentStateStorage(M365Storage):
    """An M365 `Storage` over any of our stores: reads give fresh items, an item read is
    written conditionally on the version read, one read as missing (or deleted) is written
    create-only, anything else unconditionally; a failed precondition raises our
    `ConflictError` naming the M365 keys, with nothing of the batch written. The delivery
    evidence an agent-state bot keeps in a document (`DELIVERED`) is never read as a property;
    a write of an item read keeps it."""

    def __init__(self, storage: Storage, *, namespace: str | None = None) -> None:
        if not isinstance(storage, Storage):
            raise TypeError("AgentStateStorage needs an agent_state.backends.Storage")
        self.storage = storage
        self.namespace = namespace
        to_storage_key("probe", namespace)  # a bad namespace fails here, not on first use

    def storage_key(self, key: str) -> str:
        """Our key for an M365 key (`{channel}/users/{user}` stays itself)."""
        return to_storage_key(key, self.namespace)

    async def read(
        self, keys: list[str], *, target_cls: type[ItemT], **kwargs: Any
    ) -> dict[str, ItemT]:
        """The items found (fresh objects built with `target_cls`); missing keys are absent."""
        ours = self._keys(keys, "read")
        found = await self.storage.read(list(ours))
        versions = _reads.current(start=True)
        assert versions is not None
        result: dict[str, ItemT] = {}
        for key, m365_key in ours.items():
            item = found.get(key)
            if item is None:
                versions[key] = _reads.Read(None)
            else:
                versions[key] = _reads.Read(item.etag, item.value.pop(DELIVERED, None))
                value = from_document(key, item.value)
                result[m365_key] = target_cls.from_json_to_store_item(value)  # type: ignore[assignment]
        return result

    async def write(self, changes: dict[str, M365StoreItem]) -> None:
        """Write the batch all-or-nothing, each item conditionally (see the class) and with the
        evidence its key was read with; `ValueError` for an object using `DELIVERED`."""
        if not changes or not isinstance(changes, Mapping):
            raise ValueError("AgentStateStorage.write() needs a non-empty dict of changes")
        versions = _reads.current(start=False)
        batch: dict[str, StoreItem] = {}
        names: dict[str, str] = {}
        for m365_key, item in changes.items():
            key = self.storage_key(m365_key)
            if not isinstance(item, M365StoreItem):
                raise TypeError(f"change for {m365_key!r:.80} is not a StoreItem")
            document = to_document(item.store_item_to_json())
            if DELIVERED in document:
                raise ValueError(
                    f"change for {m365_key!r:.80} has the property {DELIVERED!r}, reserved for "
                    "the delivery evidence of agent-state bots"
                )
            read = versions.get(key) if versions is not None else None
            if read is not None and read.evidence is not None:
                document = {**document, DELIVERED: read.evidence}
            batch[key] = StoreItem(document, ANY if read is None else read.etag)
            names[key] = m365_key
        try:
            etags = await self.storage.write(batch)
        except ConflictError as exc:
            failed = [names[key] for key in exc.keys if key in names]
            raise ConflictError(failed, message="changed since this turn read it") from exc
        if versions is not None:
            for key, etag in etags.items():
                versions[key] = _reads.Read(etag, batch[key].value.get(DELIVERED))

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete keys (any iterable; missing ones are ignored); a later write of one of them
        in this turn is create-only."""
        ours = self._keys(keys, "delete")
        await self.storage.delete(list(ours))
        versions = _reads.current(start=True)
        assert versions is not None
        versions.update(dict.fromkeys(ours, _reads.Read(None)))

    def _keys(self, keys: Iterable[str] | None, what: str) -> dict[str, str]:
        """Our key -> the M365 key, for a non-empty iterable of non-empty str keys."""
        if keys is None or isinstance(keys, (str, bytes)):
            raise ValueError(f"AgentStateStorage.{what}() needs a list of keys, got {keys!r:.80}")
        ours = {self.storage_key(key): key for key in keys}
        if not ours:
            raise ValueError(f"AgentStateStorage.{what}() needs at least one key")
        return ours


class TurnQueueMiddleware:
    """Turns of one conversation in this process run one at a time (M365 middleware:
    `adapter.use(TurnQueueMiddleware())`); with `attempts > 1`, a turn whose save met a
    `ConflictError` runs again on fresh state. Replies an attempt already sent cannot be
    recalled: make handlers that reply after their state change, or keep `attempts=1`."""

    def __init__(self, *, attempts: int = 1) -> None:
        if type(attempts) is not int or attempts < 1:
            raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
        self.attempts = attempts
        self._queues: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}

    async def on_turn(
        self, context: TurnContext, logic: Callable[[TurnContext], Awaitable[Any]]
    ) -> None:
        activity = context.activity
        conversation = activity.conversation.id if activity.conversation else None
        if not conversation:
            await self._run(context, logic)
            return
        queue = (str(activity.channel_id or ""), str(conversation))
        lock, users = self._queues.setdefault(queue, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await self._run(context, logic)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._queues[queue]

    async def _run(
        self, context: TurnContext, logic: Callable[[TurnContext], Awaitable[Any]]
    ) -> None:
        for attempt in range(1, self.attempts + 1):
            token = _reads.begin_turn()
            try:
                await logic(context)
                return
            except ConflictError:
                if attempt == self.attempts:
                    raise
                _forget_loaded_state(context)
            finally:
                _reads.end_turn(token)


def _forget_loaded_state(context: TurnContext) -> None:
    """Drop the state an attempt loaded into the turn, so the next attempt reads it anew."""
    for name, value in list(context.turn_state.items()):
        if isinstance(value, CachedAgentState):
            del context.turn_state[name]
