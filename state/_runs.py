"""Runs: one invocation of the agent for a session, recorded from acceptance to its end.

A run's record lives at `S/runs/<id>` under its session's key `S` (with the session's
history and documents): `accepted`, then `completed`, `failed` or `cancelled`, with its
input (`request`) and a digest of it, the history it was given (`Selection`), the
messages it added and its result. `accept_run` stores the record before anything runs,
so "no record" never means "not started" once a run was accepted; submitting the same id
with the same input again returns that run instead of starting a second, another input
under the id is a `RunConflictError`. `open_run` (or `execute_run`) is the run's turn: it
first claims the run (`opened`, in a write of its own), so a second opener is refused, then
its appends and its completion are one commit; a failure or a cancellation is recorded.

Every accepted run holds a lease (`expires`, on the injected clock): a run whose lease ran
out before it was opened (its process died, or the store failed right after acceptance) is
taken over by the next resubmission, which runs it; one that was opened and never finished
is recorded `failed` by the next resubmission, or reopened with `recover=True`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import orjson

from ._document import Record
from ._errors import StateError
from ._history import HistoryError, check_message
from ._ids import TurnIds
from ._keys import run_key
from ._lifecycle import TURN_ATTEMPTS, open_turn, run_turn
from ._queue import TurnQueues
from ._turn_state import TurnState
from .backends import Storage

FORMAT: Final = 2
STATUSES: Final = ("accepted", "completed", "failed", "cancelled")
LEASE_SECONDS: Final = 600.0
"""How long an accepted run may wait to be opened, and an opened one to end, before a
resubmission takes it over or records it failed."""
Clock = Callable[[], float]
"""Seconds on a clock shared by the processes of a store (`time.time`; tests inject one)."""
T = TypeVar("T")


class RunConflictError(StateError, ValueError):
    """A run id that was already submitted arrived with another input."""


class RunStateError(StateError, ValueError):
    """A run is not in the state an operation needs (not accepted, not completed, unknown
    in this session)."""


@dataclass(frozen=True, slots=True)
class Selection:
    """The history a run's model call is built from, chosen explicitly (`literal`,
    `next_turn`); `drop_reasoning` leaves out reasoning messages, for this run and every
    run that builds on it."""

    kind: str
    messages: tuple[dict[str, Any], ...] = ()
    system: tuple[dict[str, Any], ...] = ()
    run_id: str | None = None
    drop_reasoning: bool = False

    def without_prior_reasoning(self) -> Selection:
        return Selection(self.kind, self.messages, self.system, self.run_id, True)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "messages": list(self.messages), "system": list(self.system),
                "run": self.run_id, "drop_reasoning": self.drop_reasoning}  # fmt: skip


def thread() -> Selection:
    """The session's whole history as it stands when the run's model call is built (an
    AG-UI run: the thread's messages, the client's new ones included); `model_messages`
    records how many messages that was, so `next_turn` builds on exactly them."""
    return Selection("thread")


def literal(messages: Iterable[dict[str, Any]]) -> Selection:
    """Exactly these messages (the client keeps the history; `literal([])` for none), each
    checked like any untrusted message."""
    return Selection("literal", tuple(check_message(m) for m in messages))


def next_turn(
    completed_run_id: str,
    system_messages: Iterable[dict[str, Any]] = (),
    fresh_messages: Iterable[dict[str, Any]] = (),
) -> Selection:
    """The session's messages up to and including those of a completed run of the same
    session, after `system_messages` and followed by `fresh_messages` (no system ones)."""
    if not isinstance(completed_run_id, str) or not completed_run_id:
        raise RunStateError(f"next_turn needs the id of a completed run, got {completed_run_id!r}")
    system = tuple(check_message(m) for m in system_messages)
    fresh = tuple(check_message(m) for m in fresh_messages)
    if any(m["role"] != "system" for m in system):
        raise HistoryError("system_messages may hold only messages with role 'system'")
    if any(m["role"] == "system" for m in fresh):
        raise HistoryError("fresh messages may not hold system messages")
    return Selection("next_turn", fresh, system, completed_run_id)


class RunRecord(Record):
    """The stored record of one run (attached under its session)."""

    kind = "run"
    format = FORMAT
    fields = {"id": str, "status": str, "input": str, "selection": dict, "children": list,
              "messages": list, "expires": (int, float), "opened": (str, type(None))}  # fmt: skip
    choices = {"status": frozenset(STATUSES)}


@dataclass(frozen=True, slots=True)
class Run:
    """A run as `accept_run` found or made it: `resubmitted` when it was there already."""

    ids: TurnIds
    run_id: str
    status: str
    selection: dict[str, Any]
    resubmitted: bool
    result: Any = None


def input_digest(run_input: Any) -> str:
    try:
        wire = orjson.dumps(run_input, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise RunStateError(f"a run's input must be JSON: {exc}") from None
    return hashlib.sha256(wire).hexdigest()


async def accept_run(
    storage: Storage,
    ids: TurnIds,
    run_id: str,
    run_input: Any,
    *,
    history: Selection,
    parent: str | None = None,
    check: Callable[[TurnState], Awaitable[object]] | None = None,
    clock: Clock = time.time,
    lease: float = LEASE_SECONDS,
) -> Run:
    """Record run `run_id` of the session of `ids` as accepted, before it runs; the same id
    with the same input returns the run already recorded (`resubmitted`), with another
    input raises `RunConflictError`. `history` must be chosen (`thread`, `literal`,
    `next_turn`). `check(state)` runs in the accepting turn before a new run is recorded:
    what it raises refuses the run with nothing written, what it changes commits with the
    record, what it returns (if not None) is kept as the run's input in place of `run_input`
    (a compact form; the digest is of `run_input`). A resubmission of a run whose `lease`
    ran out takes it over (not opened yet: returned not `resubmitted`, to be run) or
    records it failed (opened and never ended)."""
    if not isinstance(history, Selection):
        raise HistoryError("choose the run's history: literal([...]) or next_turn(run_id, ...)")
    digest = input_digest(run_input)

    async def accept(state: TurnState, attempt: int) -> Run:
        key = run_key(_session(state), run_id)
        (record,) = await state.fetch({key: RunRecord})
        stored = record.stored()
        if stored is not None:
            if stored["input"] != digest:
                raise RunConflictError(f"run {run_id!r} was submitted with another input")
            if stored["status"] != "accepted" or clock() < stored["expires"]:
                state.discard()
                return _run(ids, run_id, stored, resubmitted=True)
            if stored["opened"] is not None:  # its process died (or hung) while running it
                stored["status"], stored["error"] = "failed", "its lease ran out before it ended"
                return _run(ids, run_id, stored, resubmitted=True)
            stored["expires"] = clock() + lease  # never opened: this submission runs it
            record.holds = lease  # its session lives while the run waits (docs/lifecycle.md)
            return _run(ids, run_id, stored, resubmitted=False)
        kept = await check(state) if check is not None else None
        selection = history.to_json()
        if history.kind == "next_turn":
            (before,) = await state.fetch(
                {run_key(_session(state), str(history.run_id)): RunRecord}
            )
            done = before.stored()
            if done is None or done["status"] != "completed":
                raise RunStateError(
                    f"run {history.run_id!r} is not a completed run of this session"
                )
            selection["drop_reasoning"] |= done["selection"]["drop_reasoning"]
        if parent is not None:
            (above,) = await state.fetch({run_key(_session(state), parent): RunRecord})
            parent_run = above.stored()
            if parent_run is None:
                raise RunStateError(f"parent run {parent!r} is not a run of this session")
            parent_run["children"] = [*parent_run["children"], run_id]
        record.value.update({"format": FORMAT, "id": run_id, "status": "accepted", "input": digest,
                       "request": run_input if kept is None else kept, "selection": selection,
                       "parent": parent, "children": [], "messages": [], "result": None,
                       "error": None, "expires": clock() + lease, "opened": None})  # fmt: skip
        record.holds = lease
        return _run(ids, run_id, record.value, resubmitted=False)

    return await run_turn(storage, ids, accept)  # a concurrent submission: run again, see it


async def model_messages(state: TurnState, run: Run) -> list[dict[str, Any]]:
    """The messages of the run's model call, as its `Selection` chose them."""
    selection = run.selection
    if selection["kind"] == "thread":  # recorded: the run was given the history up to here
        count = await state.history.count()
        (await _record(state, run.run_id, "accepted"))["selection"]["through"] = count
        messages = await state.history.first(count)
    elif selection["kind"] == "literal":
        messages = list(selection["messages"])
    else:
        (before,) = await state.fetch({run_key(_session(state), selection["run"]): RunRecord})
        inherited = await state.history.first(before.value["history_end"])
        messages = [*selection["system"], *inherited, *selection["messages"]]
    if selection["drop_reasoning"]:
        messages = [m for m in messages if m["role"] != "reasoning"]
    return messages


@asynccontextmanager
async def open_run(
    storage: Storage,
    run: Run,
    *,
    recover: bool = False,
    clock: Clock = time.time,
    lease: float = LEASE_SECONDS,
) -> AsyncIterator[TurnState]:
    """The turn of an accepted run: what it appends to the history and its `result`
    (`state["temp:result"]`, JSON) are committed with `completed`; an exception records `failed`,
    a cancellation `cancelled` (each in a write of its own), and propagates. A run already
    opened and not finished is refused (`RunStateError`); `recover=True` reopens one whose
    lease ran out (its opener died)."""
    token = await _claim(storage, run, recover=recover, clock=clock, lease=lease)
    try:
        async with open_turn(storage, run.ids) as state:
            before = await state.history.count()
            yield state
            await _complete(state, run, token, before)
    except asyncio.CancelledError:
        await _finish(storage, run, token, "cancelled", "cancelled")
        raise
    except BaseException as exc:
        await _finish(storage, run, token, "failed", f"{type(exc).__name__}: {exc}")
        raise


async def execute_run(
    storage: Storage,
    run: Run,
    body: Callable[[TurnState, int], Awaitable[T]],
    *,
    recover: bool = False,
    clock: Clock = time.time,
    lease: float = LEASE_SECONDS,
    attempts: int = TURN_ATTEMPTS,
    queues: TurnQueues | None = None,
) -> T:
    """`open_run` for a body that can run again: `body(state, attempt)` runs in the run's
    turn, and again on the newer state when its commit meets another writer's change it
    cannot merge (at most `attempts` runs; see `run_turn`), so runs of one session never
    fail for contention; its value is returned."""
    token = await _claim(storage, run, recover=recover, clock=clock, lease=lease)

    async def attempt(state: TurnState, number: int) -> T:
        before = await state.history.count()
        value = await body(state, number)
        await _complete(state, run, token, before)
        return value

    try:
        return await run_turn(storage, run.ids, attempt, attempts=attempts, queues=queues)
    except asyncio.CancelledError:
        await _finish(storage, run, token, "cancelled", "cancelled")
        raise
    except BaseException as exc:
        await _finish(storage, run, token, "failed", f"{type(exc).__name__}: {exc}")
        raise


async def _claim(storage: Storage, run: Run, *, recover: bool, clock: Clock, lease: float) -> str:
    """Mark the accepted run opened (by a token of this opener) in a commit of its own;
    `RunStateError` when it is not accepted, or opened already and not stale or recovered."""
    if run.status != "accepted":
        raise RunStateError(f"run {run.run_id!r} is {run.status}, not accepted")
    token = uuid.uuid4().hex

    async def claim(state: TurnState, attempt: int) -> None:
        record = await _record(state, run.run_id, "accepted")
        (document,) = await state.fetch({run_key(_session(state), run.run_id): RunRecord})
        document.holds = lease
        if record["opened"] is not None:
            if not recover:
                raise RunStateError(f"run {run.run_id!r} is already opened and not finished")
            if clock() < record["expires"]:
                raise RunStateError(f"run {run.run_id!r} is opened and its lease still runs")
        record["opened"], record["expires"] = token, clock() + lease

    await run_turn(storage, run.ids, claim)
    return token


async def _complete(state: TurnState, run: Run, token: str, before: int) -> None:
    """Record the run completed in its turn, with what it appended since `before`."""
    record = await _record(state, run.run_id, None)
    if record["opened"] != token or record["status"] != "accepted":
        raise RunStateError(
            f"run {run.run_id!r} was taken over after its lease ran out (it is {record['status']})"
        )
    count = await state.history.count()
    appended = await state.history.last(count - before)
    record.update({"status": "completed", "messages": [m["id"] for m in appended],
                   "history_end": count, "result": state.temp.get("result")})  # fmt: skip


async def cancel_run(storage: Storage, ids: TurnIds, run_id: str) -> None:
    """Mark an accepted run cancelled, with its accepted children, in one commit."""

    async def cancel(state: TurnState, attempt: int) -> None:
        record = await _record(state, run_id, None)
        if record["status"] != "accepted":
            raise RunStateError(f"run {run_id!r} is {record['status']}, not accepted")
        children = await state.fetch(
            {run_key(_session(state), child): RunRecord for child in record["children"]}
        )
        for run in (record, *(child.stored() for child in children)):
            if run is not None and run["status"] == "accepted":
                run["status"], run["error"] = "cancelled", "cancelled with its parent"
        record["error"] = "cancelled"

    await run_turn(storage, ids, cancel)


async def _finish(storage: Storage, run: Run, token: str, status: str, error: str) -> None:
    """Record the run `status` unless it ended already or another opener took it over."""

    async def finish(state: TurnState, attempt: int) -> None:
        record = await _record(state, run.run_id, None)
        if record["status"] == "accepted" and record["opened"] == token:
            record["status"], record["error"] = status, error
        else:
            state.discard()

    await run_turn(storage, run.ids, finish)


async def _record(state: TurnState, run_id: str, status: str | None) -> dict[str, Any]:
    """The stored record of run `run_id` of the turn's session (its live value, saved with
    the turn); `RunStateError` when there is none or it is not in `status`."""
    (record,) = await state.fetch({run_key(_session(state), run_id): RunRecord})
    stored = record.stored()
    if stored is None:
        raise RunStateError(f"run {run_id!r} is not a run of this session")
    if status is not None and stored["status"] != status:
        raise RunStateError(f"run {run_id!r} is {stored['status']}, not {status}")
    return stored


def _run(ids: TurnIds, run_id: str, record: dict[str, Any], *, resubmitted: bool) -> Run:
    return Run(ids, run_id, record["status"], record["selection"], resubmitted, record["result"])


def _session(state: TurnState) -> str:
    key = state.session.key
    if key is None:
        raise RunStateError("runs belong to a session: this turn has none")
    return key
