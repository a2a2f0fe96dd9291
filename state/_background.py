"""State access for background jobs: by ids, with no turn and no activity.

Two ways to edit, both bounded by `retries` and ending in `StateConflictError`:

- `edit_state(storage, cls, ids, fn)` runs `fn(bucket)` on a fresh read and re-runs it on a
  newer read whenever the write meets a conflict, with the turns' policy (`run_turn`): as
  many runs, the same backoff, and after a conflict the edits of one key in this process
  take turns. Right for any edit (counters included); contention does not fail it.
- `async with open_state(storage, cls, ids) as bucket:` saves on exit. A block cannot be
  re-run, so on a conflict its recorded patch is replayed onto the newer version when the
  other writer changed nothing the block read or wrote (a list counts as one value);
  otherwise `StateConflictError` names the paths instead of overwriting.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import lru_cache
from typing import TypeVar

from ._bucket import AgentState, document_of
from ._errors import StateConflictError
from ._ids import TurnIds
from ._keys import list_prefix, parse_key
from ._lifecycle import (
    TURN_ATTEMPTS,
    ConflictRetries,
    _queued,
    open_turn,
    read_turn,
    save_documents,
)
from ._plan import Scopes
from ._queue import TurnQueues
from ._scopes import UserState
from .backends import InvalidKeyError, Storage

B = TypeVar("B", bound=AgentState)

_QUEUES = TurnQueues()
"""The queues of the keys this process's background edits met a conflict on."""


async def read_state(storage: Storage, cls: type[B], ids: TurnIds) -> B:
    """Read one scope's bucket for `ids` (empty when not stored yet)."""
    state = await read_turn(storage, ids, _only(cls))
    return state.scope(cls.scope)  # type: ignore[return-value]


async def edit_state(
    storage: Storage,
    cls: type[B],
    ids: TurnIds,
    fn: Callable[[B], Awaitable[object] | object],
    *,
    retries: int = TURN_ATTEMPTS - 1,
) -> B:
    """Read, apply `fn` (sync or async) and write; on a conflict re-read and re-run `fn`, at
    most `retries` more times, like a turn: after a jittered backoff, and holding this
    process's queue of the key, so concurrent edits in one process take turns instead of
    meeting again."""
    policy = ConflictRetries(retries, rerun=True)
    contended: set[str] = set()
    while True:
        try:
            if not contended:
                return await _edit(storage, cls, ids, fn)
            async with _queued(_QUEUES, contended):
                return await _edit(storage, cls, ids, fn)
        except StateConflictError as exc:
            contended.update(exc.keys)
            await policy.after(exc)


async def _edit(
    storage: Storage, cls: type[B], ids: TurnIds, fn: Callable[[B], Awaitable[object] | object]
) -> B:
    """One run of `edit_state`: read, apply `fn`, write conditionally."""
    bucket = await read_state(storage, cls, ids)
    outcome = fn(bucket)
    if inspect.isawaitable(outcome):
        await outcome
    await save_documents(storage, [document_of(bucket)])
    return bucket


@asynccontextmanager
async def open_state(
    storage: Storage, cls: type[B], ids: TurnIds, *, retries: int = 3
) -> AsyncIterator[B]:
    """Yield a bucket read fresh and save it when the block exits without an error.

    On a conflict the block's changes are rebased onto the newer version and written again;
    `StateConflictError` when both changed the same paths or the retries run out.
    """
    async with open_turn(storage, ids, scopes=_only(cls), retries=retries) as state:
        yield state.scope(cls.scope)  # type: ignore[misc]


def open_user(
    storage: Storage,
    channel_id: str,
    user_id: str,
    *,
    namespace: str | None = None,
    retries: int = 3,
) -> AbstractAsyncContextManager[UserState]:
    """`open_state` for a user's state on a channel."""
    ids = TurnIds(channel_id=channel_id, user_id=user_id, namespace=namespace)
    return open_state(storage, UserState, ids, retries=retries)


def list_users(
    storage: Storage, channel_id: str, *, namespace: str | None = None
) -> AsyncIterator[str]:
    """The ids of the users with stored state on a channel (session keys are not included)."""
    return _list_ids(storage, channel_id, "users", "user", namespace)


def list_conversations(
    storage: Storage, channel_id: str, *, namespace: str | None = None
) -> AsyncIterator[str]:
    """The ids of a channel's conversations with stored state (not their sessions)."""
    return _list_ids(storage, channel_id, "conversations", "conversation", namespace)


async def _list_ids(
    storage: Storage, channel_id: str, folder: str, scope: str, namespace: str | None
) -> AsyncIterator[str]:
    """Decode the keys under `{channel}/{folder}/` of `scope`'s buckets; skip any other key
    (the records beside them, keys of another scheme)."""
    async for key in storage.list(list_prefix(channel_id, folder, namespace=namespace)):
        try:
            parsed = parse_key(key, namespace=namespace)
        except InvalidKeyError:
            continue
        if parsed.scope == scope and parsed.kind == "state":
            yield parsed.user if scope == "user" else parsed.conversation  # type: ignore[misc]


@lru_cache(maxsize=256)
def _only(cls: type[AgentState]) -> Scopes:
    """The plan of a job that uses one scope (one per class: plans cache their keys)."""
    return Scopes([cls], include_builtin=False)
