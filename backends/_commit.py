"""All-or-nothing batches on stores that write key by key: a commit through intents.

A batch a store cannot apply in one atomic step (keys in several of its atomic units, or
read checks, where `atomic_batches` is False) is committed in steps readers can tell apart:

1. read the batch's keys (settling other commits first) and check every precondition;
2. replace each document to write by an *intent*, conditional on its version: a reserved
   member holding the documents before and after, the commit's id and a deadline;
3. check that the read-checked keys are still at their versions;
4. commit: create the record `RECORDS/<id>` saying so (create-only). When every write is
   in one atomic unit there is no record: step 5 is then the commit itself;
5. replace the intents by the documents after, and delete the record.

A reader meeting an intent sees the document after it if the record says committed (and
deletes the intent once that document's TTL passed, so the key can be created again), puts
the document before back if the record says aborted (or, without a record, once the commit
is late), and waits while the commit is under way. A commit is late at its deadline (the
writer's clock) or once the reader waited `intent_timeout` on its own steady clock,
whichever comes first: a writer's clock running ahead cannot make readers wait longer. A
commit still undecided when late is aborted by creating its record as aborted. Records are
create-only, so commit and abort cannot both win, whichever process dies at whichever step;
clocks decide only when to stop waiting and abort, which is always safe.

A refused commit puts back the documents it had replaced by intents, under new versions:
it names their keys among the conflicts, so the caller reads them anew with the others.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from ._errors import (
    ConflictError,
    FormatError,
    StorageError,
    StorageUnavailableError,
)
from ._items import ANY, CONFLICT, Outcomes, PreparedWrite, StoreItem, precondition_holds, remaining

if TYPE_CHECKING:
    from ._base import Storage

INTENT: Final = "~agent-state:intent"
"""The reserved member of an intent document; refused in documents callers write."""
RECORDS: Final = "agent-state-commits"
"""First segment of the commit records' keys; `list` does not show them."""
COMMITTED, ABORTED = "committed", "aborted"
ABORTED_RECORD_TTL: Final = 86400.0
"""An aborted record may expire: an intent outliving it is aborted again, the same way, and
a writer stalled half as long past its deadline never commits."""
FIRST_WAIT, LONGEST_WAIT = 0.001, 0.05
"""Seconds a reader waits for a running commit, doubling from FIRST to LONGEST."""
ANY_RETRIES: Final = 10
"""How often a batch whose only conflicts were unconditional writes is committed again."""

_log = logging.getLogger(__name__)


class Clock(Protocol):
    """The clocks the protocol reads and waits on (`Storage.clock`): a seam for tests."""

    def time(self) -> float:
        """Unix time: deadlines and expiries, which other processes compare with theirs."""
        ...

    def monotonic(self) -> float:
        """Seconds on this process's steady clock: how long a reader has waited."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Let `seconds` pass on these clocks."""
        ...


class _SystemClock:
    """The machine's clocks."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(asyncio.sleep)
    time = staticmethod(time.time)  # last: it shadows the module in the class body


SYSTEM_CLOCK: Final[Clock] = _SystemClock()
_INTENT_BYTES = orjson.dumps(INTENT)


@dataclass(frozen=True, slots=True)
class Intent:
    """A parsed intent: what a commit will make of one document, and how to find its fate."""

    commit: str
    recorded: bool
    deadline: float
    before: dict[str, Any] | None
    after: dict[str, Any]
    expires_at: float | None

    @property
    def record(self) -> str:
        return f"{RECORDS}/{self.commit}"


def parse(key: str, value: dict[str, Any]) -> Intent:
    """The intent stored at `key`; `FormatError` for a malformed one."""
    fields = value[INTENT]
    if not (isinstance(fields, dict) and len(value) == 1):
        raise FormatError(key, "has a malformed commit intent")
    commit, recorded, deadline = fields.get("id"), fields.get("record"), fields.get("deadline")
    before, after, expires_at = fields.get("before"), fields.get("after"), fields.get("expires_at")
    if not (
        isinstance(commit, str)
        and commit.isalnum()
        and isinstance(recorded, bool)
        and isinstance(deadline, (int, float))
        and not isinstance(deadline, bool)
        and (before is None or isinstance(before, dict))
        and isinstance(after, dict)
        and (expires_at is None or _is_time(expires_at))
    ):
        raise FormatError(key, "has a malformed commit intent")
    return Intent(commit, recorded, deadline, before, after, expires_at)


async def read_settled(storage: Storage, keys: list[str]) -> dict[str, StoreItem]:
    """`storage._read(keys)` with every intent settled into the document it stands for."""
    items = await storage._read(keys)
    for item in items.values():
        if INTENT in item.value:  # a commit across atomic units under way or left over
            await settle(storage, items)
            break
    return items


async def settle(storage: Storage, items: dict[str, StoreItem]) -> None:
    """Replace the intents among `items` by what their commits decided, in place: wait for
    commits under way, abort those past their deadline or waited for `intent_timeout` on
    this reader's clock, put back what aborted ones replaced, and delete what committed ones
    left past its TTL."""
    clock, wait = storage.clock, FIRST_WAIT
    waited_out = clock.monotonic() + storage.intent_timeout
    while True:
        intents = {key: parse(key, item.value) for key, item in items.items()
                   if INTENT in item.value}  # fmt: skip
        if not intents:
            return
        fates = await _fates(storage, intents.values())
        now, waited = clock.time(), clock.monotonic() >= waited_out
        again: list[str] = []
        undo: dict[str, tuple[dict[str, Any] | None, str | None]] = {}
        overdue = set()
        for key, intent in intents.items():
            fate, late = fates.get(intent.commit), waited or now >= intent.deadline
            if fate == COMMITTED:
                if intent.expires_at is not None and now >= intent.expires_at:
                    undo[key] = (None, items[key].etag)  # gone: so it can be created again
                else:
                    ttl = remaining(intent.expires_at, now)
                    items[key] = StoreItem(intent.after, items[key].etag, ttl=ttl)
            elif fate == ABORTED or (not intent.recorded and late):
                undo[key] = (intent.before, items[key].etag)
            else:
                again.append(key)
                if late:
                    overdue.add(intent.commit)
        if overdue:
            await _create_records(storage, overdue, ABORTED, ABORTED_RECORD_TTL)
            _log.info("aborted %d commit(s) past their deadline: %s", len(overdue), sorted(overdue))
        if undo:
            _log.info("putting back %d document(s) of aborted commits: %s", len(undo), list(undo))
            restored = await _put_back(storage, undo)
            again += [key for key in undo if key not in restored]
            for key, item in restored.items():
                if item is None:
                    del items[key]
                else:
                    items[key] = item
        if not again:
            continue
        if not (overdue or undo):  # only commits under way: give them time
            await clock.sleep(wait)
            wait = min(wait * 2, LONGEST_WAIT)
        fresh = await storage._read(again)
        for key in again:
            if key in fresh:
                items[key] = fresh[key]
            else:
                items.pop(key, None)


async def commit(
    storage: Storage, writes: list[PreparedWrite], checks: list[PreparedWrite], outcomes: Outcomes
) -> None:
    """Apply `writes` and hold `checks` all-or-nothing (see the module docstring), recording
    each written key's new etag or each failed key's `CONFLICT` in `outcomes`."""
    for _ in range(ANY_RETRIES):
        if await _commit_once(storage, writes, checks, outcomes):
            return
        unconditional = {w.key for w in writes if w.expected == ANY}
        failed = {key for key, outcome in outcomes.items() if not isinstance(outcome, str)}
        if not failed <= unconditional:
            return
        outcomes.clear()


async def _commit_once(
    storage: Storage, writes: list[PreparedWrite], checks: list[PreparedWrite], outcomes: Outcomes
) -> bool:
    """One try of `commit`; False when a precondition failed (`CONFLICT`s in `outcomes`)."""
    batch = [*writes, *checks]
    current = await read_settled(storage, [p.key for p in batch])
    etags = {key: item.etag for key, item in current.items()}
    failed = [p.key for p in batch if not precondition_holds(p.expected, etags.get(p.key))]
    if failed:
        outcomes.update(dict.fromkeys(failed, CONFLICT))
        return False
    commit_id = uuid.uuid4().hex
    recorded = len({p.group if storage.atomic_groups else p.key for p in writes}) > 1
    deadline = storage.clock.time() + storage.intent_timeout
    intents = [_intent(storage, w, current.get(w.key), commit_id, recorded, deadline)
               for w in writes]  # fmt: skip
    placed: Outcomes = {}
    try:
        await storage._write(intents, placed)
        failed = [key for key, outcome in placed.items() if outcome is CONFLICT]
        if not failed and checks:
            seen = await storage._read([c.key for c in checks])
            failed = [c.key for c in checks
                      if (seen[c.key].etag if c.key in seen else None) != c.expected]  # fmt: skip
        if not failed and recorded and not await _decide(storage, commit_id, deadline):
            failed = [w.key for w in writes]  # aborted first, or too late to commit
        if failed:
            raise ConflictError(failed)
    except ConflictError as exc:
        await _take_back(storage, intents, current, placed)
        moved = [key for key, outcome in placed.items() if isinstance(outcome, str)]
        outcomes.update(dict.fromkeys([*exc.keys, *moved], CONFLICT))  # all to read anew
        return False
    except _InDoubt as doubt:
        raise doubt.error from doubt.error.__cause__
    except BaseException:
        await _take_back(storage, intents, current, placed)
        raise
    final = [replace(w, expected=str(placed[w.key])) for w in writes]
    done: Outcomes = {}
    if not recorded:  # replacing the intents is the commit: all of them, or a reader aborted it
        try:
            await storage._write(final, done)
        except BaseException:
            await _take_back(storage, intents, current, placed)
            raise
        if any(not isinstance(done.get(w.key), str) for w in writes):  # a reader aborted it
            await _take_back(storage, intents, current, placed)
            outcomes.update(dict.fromkeys([w.key for w in writes], CONFLICT))
            return False
        outcomes.update(done)
        return True
    for _ in range(2):  # again for the keys of a unit that a conflict of another key held back
        final = [w for w in final if w.key not in done]
        if not final or not await _quietly(storage._write(final, done), "replace intents"):
            break
    outcomes.update(placed)  # an intent left in place reads as committed, under its own etag
    outcomes.update({key: etag for key, etag in done.items() if isinstance(etag, str)})
    if len(done) == len(writes):  # no intent is left (a conflict: a later write replaced it)
        await _quietly(storage._delete([f"{RECORDS}/{commit_id}"], {}, {}), "delete a record")
    return True


def _intent(
    storage: Storage,
    write: PreparedWrite,
    before: StoreItem | None,
    commit_id: str,
    recorded: bool,
    deadline: float,
) -> PreparedWrite:
    """The intent replacing `write.key`'s document, conditional on the version read."""
    expires_at = storage.clock.time() + write.ttl if write.ttl is not None else None
    fields = {"id": commit_id, "record": recorded, "deadline": deadline, "expires_at": expires_at}
    head = orjson.dumps(fields)
    before_bytes = b"null"
    if before is not None:
        before_bytes = before.data or orjson.dumps(before.value)
    data = b"".join((b"{", _INTENT_BYTES, b":", head[:-1], b',"before":', before_bytes,
                     b',"after":', write.data, b"}}"))  # fmt: skip
    value = {INTENT: {**fields, "before": before.value if before else None, "after": write.value}}
    expected = before.etag if before else None
    return replace(write, data=data, value=value, expected=expected, ttl=None)


class _InDoubt(Exception):
    """The store failed while recording a commit, and whether it landed is unknown."""

    def __init__(self, error: StorageUnavailableError) -> None:
        super().__init__(error)
        self.error = error


async def _decide(storage: Storage, commit_id: str, deadline: float) -> bool:
    """The commit point: create the record as committed; False if a reader aborted the
    commit first, or may have with a record since expired (the writer is `ABORTED_RECORD_TTL`
    / 2 past its deadline). When the store fails to answer, learn whether the record landed
    by trying to abort it (`_InDoubt` if that fails too)."""
    if storage.clock.time() >= deadline + ABORTED_RECORD_TTL / 2:
        return False
    try:
        fates = await _create_records(storage, [commit_id], COMMITTED, None)
    except StorageError as failure:
        try:
            aborted = await _create_records(storage, [commit_id], ABORTED, ABORTED_RECORD_TTL)
        except StorageError:
            raise _InDoubt(
                StorageUnavailableError(
                    f"commit in doubt: the store failed while recording it ({failure}); readers"
                    " will see the whole batch or none of it"
                )
            ) from failure
        if aborted[commit_id] is not CONFLICT:
            raise  # aborted now: nothing of the batch will be seen
        return True  # the record landed before the store failed
    return fates[commit_id] is not CONFLICT


async def _take_back(
    storage: Storage,
    intents: list[PreparedWrite],
    current: dict[str, StoreItem],
    placed: Outcomes,
) -> None:
    """Put back the documents an abandoned commit replaced by intents (best effort: an
    intent left behind is aborted by the next reader after its deadline)."""
    undo = {}
    for intent in intents:
        etag = placed.get(intent.key)
        if isinstance(etag, str):
            before = current.get(intent.key)
            undo[intent.key] = (before.value if before else None, etag)
    if undo:
        await _quietly(_put_back(storage, undo), "take back intents")


async def _put_back(
    storage: Storage, undo: Mapping[str, tuple[dict[str, Any] | None, str | None]]
) -> dict[str, StoreItem | None]:
    """Put `undo`'s documents back where their intents still are (None: delete); per key
    done, its item (None: absent). Keys left out changed meanwhile."""
    writes, deletes = [], {}
    for key, (before, etag) in undo.items():
        if etag is None:
            continue
        if before is None:
            deletes[key] = etag
        else:
            data = orjson.dumps(before)
            writes.append(PreparedWrite(key, data, before, etag, storage.group_of(key), None))
    outcomes: Outcomes = {}
    if writes:
        await storage._write(writes, outcomes)
    restored: dict[str, StoreItem | None] = {}
    for write in writes:
        outcome = outcomes.get(write.key)
        if isinstance(outcome, str):
            restored[write.key] = StoreItem(orjson.loads(write.data), outcome, write.data)
    if deletes:
        gone: Outcomes = {}
        await storage._delete(list(deletes), deletes, gone)
        restored.update({key: None for key in deletes if key not in gone})
    return restored


async def _fates(storage: Storage, intents: Iterable[Intent]) -> dict[str, str]:
    """What the records of recorded intents say: commit id -> COMMITTED or ABORTED."""
    records = {intent.record: intent.commit for intent in intents if intent.recorded}
    if not records:
        return {}
    found = await storage._read(list(records))
    fates = {}
    for record, item in found.items():
        status = item.value.get("status")
        if status not in (COMMITTED, ABORTED):
            raise FormatError(record, f"is a commit record with status {status!r}")
        fates[records[record]] = status
    return fates


async def _create_records(
    storage: Storage, commit_ids: Iterable[str], status: str, ttl: float | None
) -> dict[str, object]:
    """Create the records of `commit_ids` with `status`, create-only: per id, its outcome."""
    value = {"status": status}
    writes = [
        PreparedWrite(record, orjson.dumps(value), value, None, storage.group_of(record), ttl)
        for record in (f"{RECORDS}/{commit_id}" for commit_id in commit_ids)
    ]
    outcomes: Outcomes = {}
    await storage._write(writes, outcomes)
    return {w.key.rsplit("/", 1)[1]: outcomes.get(w.key) for w in writes}


async def _quietly(step: Awaitable[object], what: str) -> bool:
    """Await a clean-up step whose failure changes nothing readers see; False (and a log
    line) if the store failed it."""
    try:
        await step
    except StorageError as exc:
        _log.warning("agent-state commit: could not %s (%s); readers settle it", what, exc)
        return False
    return True


def _is_time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
