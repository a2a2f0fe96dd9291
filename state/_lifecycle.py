"""The turn lifecycle: load every bucket in one read, save the changed ones in one write.

`open_turn` is the one way a turn (a bot turn, a background job, an AG-UI run) gets its
state: `async with open_turn(storage, ids) as state:` loads in one batched read and saves on
a clean exit; an exception (or `state.discard()`) saves nothing. A conflicting save goes
through `retry_on_conflict`, the one retry loop: a save replays the turn's patch onto the
newer version when that is provably serial; `run_turn` (bot turns) and `edit_state` run
the turn's function again on the newer state when it is not.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TypeVar

from ._bucket import AgentState
from ._errors import StateConflictError
from ._ids import TurnIds
from ._plan import Scopes
from ._queue import TurnQueues
from ._turn_state import TurnState
from .backends import ConflictError, Storage

T = TypeVar("T")

MERGE_RETRIES = 3
"""How many times a save replays its changes onto a newer version after a conflict."""
TURN_ATTEMPTS = 16
"""How many times `run_turn` runs a turn whose changes could not be merged (first run too)."""
BACKOFF_BASE = 0.002
BACKOFF_CAP = 1.0
"""Seconds: before run n+1 a turn waits a random time up to min(CAP, d * 2**(n-1)), where d
is how long run n took (at least BASE): contenders spread over as long as a run lasts, so
a turn on a store with slow commits (Blob intents) does not re-run into the same race."""


async def read_turn(
    storage: Storage, ids: TurnIds, scopes: Scopes, extra_keys: tuple[str, ...] = ()
) -> TurnState:
    """The `TurnState` of `ids`, every persisted bucket of it read in one batched read, with
    `extra_keys` (the framework's own documents of the turn, see `TurnState.attach`)."""
    state = TurnState(ids, scopes, read=storage.read)
    await state.load(extra_keys)
    return state


async def save_buckets(storage: Storage, buckets: Iterable[AgentState]) -> None:
    """Write the changed buckets in one conditional batch; none when nothing changed.

    The buckets the turn only read go with it as read checks (`Storage.write(unchanged=)`),
    so a save never rests on a value another writer changed meanwhile. The batch is
    all-or-nothing on every store: a failed precondition raises `StateConflictError` naming
    the scopes, and every bucket keeps its changes for a retry.
    """
    pending = {}
    read: dict[str, AgentState] = {}
    for bucket in buckets:
        if bucket.key is None:
            continue
        item = bucket.pending_write()
        if item is not None:
            pending[bucket.key] = (bucket, item)
        elif bucket.was_read():
            read[bucket.key] = bucket
    if not pending:
        return
    unchanged = {key: bucket.etag for key, bucket in read.items()} or None
    try:
        etags = await storage.write(
            {key: item for key, (_, item) in pending.items()}, unchanged=unchanged
        )
    except ConflictError as exc:
        scopes = [(pending[key][0] if key in pending else read[key]).scope for key in exc.keys]
        raise StateConflictError(exc.keys, scopes=scopes) from exc
    for key, etag in etags.items():
        pending[key][0].mark_saved(etag)


async def retry_on_conflict(
    retries: int, attempt: Callable[[int], Awaitable[T]], *, rerun: bool = False
) -> T:
    """Run `attempt(0)`, then `attempt(1)`... while it raises `StateConflictError`, at most
    `retries` more times.

    A merge attempt stops at a conflict that is not `retryable` (a clash on a path). With
    `rerun` each attempt runs the whole turn again on a fresh read, after a jittered backoff,
    so every conflict may be retried: a failed save wrote nothing. The backoff grows with the
    run's own duration (see `BACKOFF_CAP`).
    """
    check_retries(retries)
    clock = asyncio.get_running_loop().time
    for number in range(retries + 1):
        started = clock() if rerun else 0.0  # only a re-run's backoff needs the duration
        try:
            return await attempt(number)
        except StateConflictError as exc:
            if (not rerun and not exc.retryable) or number == retries:
                failed = exc
                break
        if rerun:
            window = max(BACKOFF_BASE, clock() - started) * 2**number
            await asyncio.sleep(random.uniform(0, min(BACKOFF_CAP, window)))
    message = failed.reason
    if failed.retryable or rerun:
        scopes = ", ".join(map(repr, failed.scopes))
        tries = "runs of the turn" if rerun else "conflicting writes"
        message = f"gave up after {number + 1} {tries} of {scopes} state: {failed.reason}"
    raise StateConflictError(
        failed.keys,
        scopes=failed.scopes,
        paths=failed.paths,
        message=message,
        retryable=failed.retryable,
    ) from failed


async def save_merging(storage: Storage, buckets: list[AgentState], *, retries: int) -> None:
    """`save_buckets`, and on a conflict re-read the conflicting buckets, rebase (where that
    is provably what a serial order gives, see `AgentState.rebase`) and write again."""
    conflict: list[StateConflictError] = []

    async def attempt(number: int) -> None:
        if number:
            await _rebase(storage, buckets, conflict[-1].keys)
        try:
            await save_buckets(storage, buckets)
        except StateConflictError as exc:
            conflict.append(exc)
            raise

    await retry_on_conflict(retries, attempt)


def open_turn(
    storage: Storage,
    ids: TurnIds,
    *,
    scopes: Scopes | Iterable[type[AgentState]] = (),
    retries: int = MERGE_RETRIES,
    extra_keys: tuple[str, ...] = (),
) -> _OpenTurn:
    """`async with open_turn(...) as state:` loads the turn's buckets in one read, gives its
    `TurnState`, and saves it when the block ends cleanly.

    `scopes`: a `Scopes` plan, or custom scope classes added to the built-in ones. On a
    conflict the turn's changes are replayed onto the newer versions (`retries` times) when
    the other writer changed nothing the turn read or wrote; else `StateConflictError` names
    the scopes and paths. An exception in the block saves nothing. Once the
    block is over the state is closed: using it raises `StateClosedError`.
    """
    check_retries(retries)
    plan = scopes if isinstance(scopes, Scopes) else Scopes(scopes)
    return _OpenTurn(storage, ids, plan, retries, extra_keys)


class _OpenTurn:
    """The context manager `open_turn` returns (a class, not a generator: every turn pays)."""

    __slots__ = ("_storage", "_ids", "_plan", "_retries", "_extra", "state")

    def __init__(
        self, storage: Storage, ids: TurnIds, plan: Scopes, retries: int, extra: tuple[str, ...]
    ) -> None:
        self._storage, self._ids, self._plan = storage, ids, plan
        self._retries, self._extra = retries, extra
        self.state: TurnState | None = None
        """The turn's state once loaded."""

    async def __aenter__(self) -> TurnState:
        self.state = await read_turn(self._storage, self._ids, self._plan, self._extra)
        return self.state

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        state = self.state
        assert state is not None
        try:
            if kind is None and not state.discarded:
                await save_merging(self._storage, state.stored_buckets(), retries=self._retries)
        finally:
            state.close()


async def run_turn(
    storage: Storage,
    ids: TurnIds,
    body: Callable[[TurnState, int], Awaitable[T]],
    *,
    scopes: Scopes | Iterable[type[AgentState]] = (),
    attempts: int = TURN_ATTEMPTS,
    extra_keys: tuple[str, ...] = (),
    queues: TurnQueues | None = None,
) -> T:
    """Run `body(state, attempt)` in a turn (`open_turn`), and run it again on the newer
    state when its save meets a conflict it cannot merge: at most `attempts` runs in all,
    the first being attempt 1. Only the last run's changes are saved; what a discarded run
    returned is dropped. `StateConflictError` when the runs are used up, when the body
    called `state.forbid_rerun()`, or when a store without atomic batches kept part of a
    failed save (see `retry_on_conflict`).

    With `queues`, a run after a conflict first takes the queue of each key it conflicted
    on, so this process's turns that keep meeting on one bucket (an app-wide counter) take
    turns instead of overtaking each other again.
    """
    if type(attempts) is not int or attempts < 1:
        raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
    plan = scopes if isinstance(scopes, Scopes) else Scopes(scopes)
    contended: set[str] = set()

    async def attempt(number: int) -> T:
        turn = open_turn(storage, ids, scopes=plan, extra_keys=extra_keys)
        try:
            if not (contended and queues):
                async with turn as state:
                    return await body(state, number + 1)
            async with _queued(queues, contended), turn as state:
                return await body(state, number + 1)
        except StateConflictError as exc:
            if turn.state is not None and not turn.state.rerun:
                raise _NoRerun(exc) from exc
            contended.update(exc.keys)
            raise

    try:
        return await retry_on_conflict(attempts - 1, attempt, rerun=True)
    except _NoRerun as stop:
        raise stop.conflict from None


@asynccontextmanager
async def _queued(queues: TurnQueues, keys: set[str]) -> AsyncIterator[None]:
    """Hold the in-process queue of each of `keys` (in one order, so turns cannot deadlock)."""
    async with AsyncExitStack() as held:
        for key in sorted(keys):
            await held.enter_async_context(queues.turn(("key", key)))
        yield


class _NoRerun(Exception):
    """Carries a conflict of a turn that must not run again out of the retry loop."""

    def __init__(self, conflict: StateConflictError) -> None:
        super().__init__(conflict)
        self.conflict = conflict


def check_retries(retries: object) -> None:
    """Refuse a retry count that is not an int >= 0 (before anything is read or written)."""
    if type(retries) is not int or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")


async def _rebase(storage: Storage, buckets: list[AgentState], keys: list[str]) -> None:
    """Replay the changes of the buckets of `keys` onto their stored versions, read anew."""
    found = await storage.read(keys)
    by_key = {bucket.key: bucket for bucket in buckets}
    for key in keys:
        by_key[key].rebase(found.get(key))
