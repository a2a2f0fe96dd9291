"""The turn lifecycle: load every bucket in one read, save the changed ones in one write.

`open_turn` is the one way a turn (a bot turn, a background job, an AG-UI run) gets its
state: `async with open_turn(storage, ids) as state:` loads in one batched read and saves on
a clean exit; an exception (or `state.discard()`) saves nothing. A conflicting save goes
through `ConflictRetries`, the one retry policy: a save replays the turn's patch onto the
newer version when that is provably serial; `run_turn` (bot turns) and `edit_state` run
the turn's function again on the newer state when it is not.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TypeVar

from ._bucket import AgentState
from ._document import Document
from ._errors import StateConflictError
from ._events import report
from ._ids import TurnIds
from ._keys import session_index_key
from ._plan import Declaration, Scopes
from ._queue import TurnQueues, carried
from ._retention import give_expiry
from ._turn_state import TurnState
from .backends import ConflictError, Storage, StoreItem
from .backends._items import BuiltWrites

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


async def read_turn(storage: Storage, ids: TurnIds, scopes: Scopes) -> TurnState:
    """The `TurnState` of `ids`, every persisted bucket of it read in one batched read."""
    state = TurnState(ids, scopes, read=storage.read)
    await state.load()
    return state


async def save_documents(storage: Storage, documents: Iterable[Document]) -> None:
    """Write the changed documents (buckets' and records) in one conditional batch; none when
    nothing changed.

    The documents the turn only read go with it as read checks (`Storage.write(unchanged=)`),
    so a save never rests on a value another writer changed meanwhile; one the turn read at an
    older schema version (migrated on load) is written migrated instead. The batch is
    all-or-nothing on every store: a failed precondition raises `StateConflictError` naming
    the scopes (or record kinds), and every document keeps its changes for a retry. A batch
    that starts a session also writes the user's index entry of it (`session_index_key`), so
    no session is ever stored without the entry `forget_user` finds it by; the documents of a
    session whose scope has a TTL get its one expiry (`give_expiry`). A batch writing
    only delivery evidence (no value changed) carries no read checks: the turn's outcome
    stands as of its read, like a turn without an id that writes nothing.
    """
    documents = list(documents)
    pending: dict[str, tuple[Document, StoreItem]] = {}
    read: dict[str, Document] = {}
    expiring = False  # a TTL (its class's) or a stored expiry: else no retention step at all
    for document in documents:
        key = document.key
        if key is None:
            continue
        if document.ttl is not None or document.expires_at is not None:
            expiring = True
        item = document.pending_write()
        if item is not None:
            pending[key] = (document, item)
        elif document.was_read():
            read[key] = document
    if not pending:
        return
    for key, document in list(read.items()):  # a document migrated on load goes along
        upgrade = document.upgrade_write()
        if upgrade is not None:
            pending[key] = (document, upgrade)
            del read[key]
    if all(document.evidence_only() for document, _ in pending.values()):
        read.clear()  # delivery evidence alone changes no value: nothing read needs checking
    renewals = await give_expiry(storage, documents, pending, read) if expiring else {}
    # the documents' keys were checked when built (the plan, `TurnState.attach`) and their
    # bytes by `Document.pending_write`; renewals rewrite stored documents under listed keys:
    # the storage takes the batch without checking again
    changes = BuiltWrites({key: document.etag for key, document in read.items()} or None)
    changes.update(renewals)
    for key, (_, item) in pending.items():
        changes[key] = item
        if item.etag is None and item.ttl is None and (index := session_index_key(key)):
            changes[index[0]] = StoreItem({"session": index[1]}, "*")  # TTL'd: `give_expiry`'s
    carrying = carried()  # in a carrying queue: the next turn may start from this commit
    checks: dict[str, str | None] = {}
    if carrying is not None and storage.atomic_batches:
        checks = carrying.checks(changes, changes.unchanged)
        if checks:  # so that all it knows is handed on as of this commit
            changes.unchanged = {**(changes.unchanged or {}), **checks}
    unchanged = changes.unchanged
    try:
        etags = await storage.write(changes, unchanged=unchanged)
    except ConflictError as exc:
        if carrying is not None:
            carrying.forget()  # a merge's next write checks only what the turn read
        keys = list(dict.fromkeys(_renewed(key, renewals, pending) for key in exc.keys))
        scopes = ["unused" if key in checks else _kind(key, pending, read) for key in keys]
        report("conflict", scopes=scopes, keys=len(keys))
        raise StateConflictError(keys, scopes=scopes) from exc
    if carrying is not None:
        carrying.wrote(changes, etags, unchanged)
    for key, (document, _) in pending.items():
        document.mark_saved(etags[key])


def _renewed(
    key: str, renewals: dict[str, StoreItem], pending: dict[str, tuple[Document, StoreItem]]
) -> str:
    """A conflicting key of a save, or for a document it renewed, its session's bucket (read
    again, it says whether the session is still due)."""
    if key not in renewals:
        return key
    buckets = [k for k, (d, w) in pending.items() if d.kind == "session" and w.ttl is not None]
    return next((k for k in buckets if key.startswith(f"{k}/")), buckets[0])


def _kind(
    key: str, pending: dict[str, tuple[Document, StoreItem]], read: dict[str, Document]
) -> str:
    """What a conflicting key of a save holds, for `StateConflictError`."""
    if key in pending:
        return pending[key][0].kind
    return read[key].kind if key in read else "user_session"


class ConflictRetries:
    """The one retry policy of the lifecycle: how many more attempts a conflict allows, and the
    backoff before a re-run. Callers make the first attempt without one and build the policy
    only when it met a conflict (`started=` when the first attempt began), then loop `await
    policy.after(exc)` and attempt again: a turn that meets no conflict (nearly every one)
    costs nothing of the policy's.

    A merge attempt (`rerun=False`) stops at a conflict that is not `retryable` (a clash on a
    path). With `rerun` each attempt runs the whole turn again on a fresh read, after a
    jittered backoff that grows with the run's own duration (see `BACKOFF_CAP`), so every
    conflict may be retried: a failed save wrote nothing.
    """

    __slots__ = ("retries", "rerun", "number", "_started")

    def __init__(self, retries: int, *, rerun: bool = False, started: float | None = None) -> None:
        """`started`: when the first attempt began (`time.monotonic()`), for a policy made only
        once an attempt met a conflict (so a turn that meets none builds no policy); else now."""
        check_retries(retries)
        self.retries, self.rerun = retries, rerun
        self.number = 0
        """The attempt under way, from 0."""
        self._started = time.monotonic() if started is None else started

    async def after(self, conflict: StateConflictError) -> None:
        """Return when the next attempt may start (`number` counts it); raise the final
        `StateConflictError` (saying how many attempts failed) when `conflict` ends them."""
        number = self.number
        if (not self.rerun and not conflict.retryable) or number == self.retries:
            if self.rerun:
                report("given_up", runs=number + 1, scopes=conflict.scopes, keys=conflict.keys)
            raise _given_up(conflict, number + 1, self.rerun) from conflict
        if self.rerun:
            window = max(BACKOFF_BASE, time.monotonic() - self._started) * 2**number
            await asyncio.sleep(random.uniform(0, min(BACKOFF_CAP, window)))
            self._started = time.monotonic()
        self.number = number + 1


def _given_up(failed: StateConflictError, attempts: int, rerun: bool) -> StateConflictError:
    """The error that ends the retries at `failed`, the last of `attempts` attempts."""
    message = failed.reason
    if failed.retryable or rerun:
        scopes = ", ".join(map(repr, failed.scopes))
        tries = "runs of the turn" if rerun else "conflicting writes"
        message = f"gave up after {attempts} {tries} of {scopes} state: {failed.reason}"
    return StateConflictError(
        failed.keys,
        scopes=failed.scopes,
        paths=failed.paths,
        message=message,
        retryable=failed.retryable,
    )


async def save_merging(storage: Storage, documents: list[Document], *, retries: int) -> None:
    """`save_documents`, and on a conflict re-read the conflicting documents, rebase (where
    that is provably what a serial order gives, see `Document.rebase`) and write again."""
    try:
        return await save_documents(storage, documents)
    except StateConflictError as exc:
        await _merge(storage, documents, exc, retries)


async def _merge(
    storage: Storage, documents: list[Document], conflict: StateConflictError, retries: int
) -> None:
    """The rest of `save_merging` once its first write met `conflict`."""
    policy = ConflictRetries(retries)  # only a save that met a conflict needs one
    while True:
        await policy.after(conflict)  # raises when `conflict` ends the retries
        try:
            await _rebase(storage, documents, conflict.keys)
            report("merge", scopes=conflict.scopes, keys=len(conflict.keys))
            return await save_documents(storage, documents)
        except StateConflictError as exc:
            conflict = exc


def open_turn(
    storage: Storage,
    ids: TurnIds,
    *,
    scopes: Scopes | Iterable[type[AgentState]] = (),
    retries: int = MERGE_RETRIES,
    extra_keys: Iterable[str] = (),
) -> _OpenTurn:
    """`async with open_turn(...) as state:` loads the turn's buckets in one read, gives its
    `TurnState`, and saves it when the block ends cleanly. `extra_keys`: framework records
    read in that same read (`TurnState.attach` them).

    `scopes`: a `Scopes` plan, or custom scope classes added to the built-in ones. On a
    conflict the turn's changes are replayed onto the newer versions (`retries` times) when
    the other writer changed nothing the turn read or wrote; else `StateConflictError` names
    the scopes and paths. An exception in the block saves nothing. Once the
    block is over the state is closed: using it raises `StateClosedError`.
    """
    check_retries(retries)
    plan = scopes if isinstance(scopes, Scopes) else Scopes(scopes)
    return _OpenTurn(storage, ids, plan, retries, None, tuple(extra_keys))


class _OpenTurn:
    """The context manager `open_turn` returns (a class, not a generator: every turn pays)."""

    __slots__ = ("_storage", "_ids", "_plan", "_retries", "_declared", "_extra", "state")

    def __init__(
        self,
        storage: Storage,
        ids: TurnIds,
        plan: Scopes,
        retries: int,
        declared: Declaration | None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self._storage, self._ids, self._plan = storage, ids, plan
        self._retries, self._declared, self._extra = retries, declared, extra
        self.state: TurnState | None = None
        """The turn's state once loaded."""

    async def __aenter__(self) -> TurnState:
        carrying = carried()  # in a carrying queue: the first read may be what was handed on
        read = self._storage.read if carrying is None else carrying.reader(self._storage.read)
        state = self.state = TurnState(self._ids, self._plan, read=read, declared=self._declared)
        await state.load(self._extra)  # `read_turn`, inline: every turn enters this
        return state

    async def __aexit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        state = self.state
        assert state is not None
        saved = False
        try:
            if kind is None and not state.discarded:  # `save_merging`, inline: every turn
                documents = state.stored_documents()
                try:
                    await save_documents(self._storage, documents)
                except StateConflictError as exc:
                    await _merge(self._storage, documents, exc, self._retries)
            saved = kind is None and not state.discarded
        finally:
            state.close()
            if not saved and (carrying := carried()) is not None:
                carrying.forget()  # a failed or discarded turn hands nothing on


async def run_turn(
    storage: Storage,
    ids: TurnIds,
    body: Callable[[TurnState, int], Awaitable[T]],
    *,
    scopes: Scopes | Iterable[type[AgentState]] = (),
    attempts: int = TURN_ATTEMPTS,
    queues: TurnQueues | None = None,
    declared: Declaration | None = None,
) -> T:
    """Run `body(state, attempt)` in a turn (`open_turn`), and run it again on the newer
    state when its save meets a conflict it cannot merge: at most `attempts` runs in all,
    the first being attempt 1. Only the last run's changes are saved; what a discarded run
    returned is dropped. `StateConflictError` when the runs are used up, when the body
    called `state.forbid_rerun()`, or when a store without atomic batches kept part of a
    failed save (see `ConflictRetries`).

    With `queues`, a run after a conflict first takes the queue of each key it conflicted
    on, so this process's turns that keep meeting on one bucket (an app-wide counter) take
    turns instead of overtaking each other again. `declared`: the scopes a route declares
    (its turns read only those, see `TurnState`).
    """
    if type(attempts) is not int or attempts < 1:
        raise ValueError(f"attempts must be an int >= 1, got {attempts!r}")
    plan = scopes if isinstance(scopes, Scopes) else Scopes(scopes)
    started = time.monotonic()
    turn = _OpenTurn(storage, ids, plan, MERGE_RETRIES, declared)
    try:  # the first run: no retry policy, queue set or second context until a conflict
        async with turn as state:
            return await body(state, 1)
    except StateConflictError as exc:
        if turn.state is not None and not turn.state.rerun:
            raise
        conflict = exc
    policy = ConflictRetries(attempts - 1, rerun=True, started=started)
    contended: set[str] = set()
    while True:
        contended.update(conflict.keys)
        await policy.after(conflict)
        attempt = policy.number + 1
        report("rerun", ids, attempt=attempt, scopes=conflict.scopes, keys=len(conflict.keys))
        turn = _OpenTurn(storage, ids, plan, MERGE_RETRIES, declared)
        try:
            if queues is None:
                async with turn as state:
                    return await body(state, attempt)
            async with _queued(queues, contended), turn as state:
                return await body(state, attempt)
        except StateConflictError as exc:
            if turn.state is not None and not turn.state.rerun:
                raise
            conflict = exc


@asynccontextmanager
async def _queued(queues: TurnQueues, keys: set[str]) -> AsyncIterator[None]:
    """Hold the in-process queue of each of `keys` (in one order, so turns cannot deadlock)."""
    async with AsyncExitStack() as held:
        for key in sorted(keys):
            await held.enter_async_context(queues.turn(("key", key)))
        yield


def check_retries(retries: object) -> None:
    """Refuse a retry count that is not an int >= 0 (before anything is read or written)."""
    if type(retries) is not int or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")


async def _rebase(storage: Storage, documents: list[Document], keys: list[str]) -> None:
    """Replay the changes of the documents of `keys` onto their stored versions, read anew.
    A key of no document (a session index entry, whose write another batch's commit held
    up) needs nothing replayed: the next save writes it again."""
    by_key = {document.key: document for document in documents}
    mine = [key for key in keys if key in by_key]
    found = await storage.read(mine)
    for key in mine:
        by_key[key].rebase(found.get(key))
