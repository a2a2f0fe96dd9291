"""The thread service: read, list, rename and delete a user's AG-UI threads without running
the agent, behind the same owner check as runs.

A thread's summary is the record `S/agui-thread` (title, created and updated times, its
recent runs), written with the runs' own turns: the accepting turn adds the run (the first
one makes the record, titled after the first user message), the run's commit sets the
updated time and the run's end. Reading a thread costs three reads however long its
history is: the turn's buckets with the owner and summary records, the history head, then
the last page of messages together with the recent runs' records. The user's threads are
kept in order in their thread index (`_thread_index.py`), changed in the same writes as the
summaries' updated times, so a page of the list costs three reads however many threads the
user has: the index's head, at most a few of its pages, then the page's summaries and owner
records. A delete marks the owner record `deleting` first, in the write that takes the
thread out of the index (the thread is gone from then on), and deletes it last, so it is
all-or-nothing (`ThreadService.delete`).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Final, Generic

import orjson
from ag_ui.core import RunAgentInput

from .. import (
    HistoryError,
    Record,
    StateConflictError,
    TurnIds,
    TurnQueues,
    TurnState,
    conversation_key,
    escape_segment,
    open_turn,
    run_key,
    session_key,
    thread_owner_key,
    thread_record_key,
    user_key,
)
from ..backends import ConflictError, Storage, StoreItem
from ._exposed import ExposedState, M
from ._server_errors import RunInputError, ThreadNotFoundError, ThreadOwnerError
from ._thread_index import Edit, IndexKeys, edit_in_turn, edit_writes, read_stretch
from ._thread_input import Owner

FORMAT: Final = 1
RECENT_RUNS: Final = 20
"""Runs a thread's summary lists (the newest)."""
TITLE_CHARS: Final = 200
MESSAGES_PAGE: Final = 50
"""Messages a thread read returns at most (the last ones, or those before `before`)."""
MAX_THREADS_PAGE: Final = 100
BATCH: Final = 100
"""Session documents deleted at a time."""
MARK_ATTEMPTS: Final = 8
"""Times a delete tries its first write again when another thread's change to the user's
index got in first."""


class ThreadRecord(Record):
    """`S/agui-thread`: the title, times (epoch seconds) and recent runs of a thread."""

    kind = "agui_thread"
    format = FORMAT
    fields = {"title": str, "created": (int, float), "updated": (int, float), "runs": list}


class _RunStatus(Record):
    """The status members of a run record (`S/runs/{id}`), read for a thread's run list."""

    kind = "run"
    format = None
    fields = {"status": str}


def note_accepted(record: ThreadRecord, run_input: RunAgentInput, now: float) -> None:
    """In a run's accepting turn: the run first among the thread's recent runs (the thread's
    first run makes the record, titled after its first user message)."""
    value = _made(record, now, _title(run_input))
    runs = [run for run in value["runs"] if run.get("id") != run_input.run_id]
    value["runs"] = [{"id": run_input.run_id, "created": now, "finished": None}, *runs]
    del value["runs"][RECENT_RUNS:]


def note_finished(record: ThreadRecord, run_id: str, now: float) -> None:
    """In a run's committing turn: the thread was updated now, and the run ended."""
    value = _made(record, now, "")
    value["updated"] = now
    value["runs"] = [{**run, "finished": now} if run.get("id") == run_id else run
                     for run in value["runs"]]  # fmt: skip


def _made(record: ThreadRecord, now: float, title: str) -> dict[str, Any]:
    value = record.value
    if record.stored() is None:
        value.update(format=FORMAT, title=title, created=now, updated=now, runs=[])
    return value


def _title(run_input: RunAgentInput) -> str:
    for message in run_input.messages:
        content = getattr(message, "content", None)
        if message.role == "user" and isinstance(content, str) and content.strip():
            return " ".join(content.split())[:TITLE_CHARS]
    return ""


def check_title(body: Any) -> str:
    """The title of a rename body `{"title": "..."}`; `RunInputError` for anything else."""
    if not isinstance(body, dict) or set(body) != {"title"} or not isinstance(body["title"], str):
        raise RunInputError('a rename is a JSON object {"title": "..."} and nothing else')
    if len(body["title"]) > TITLE_CHARS:
        raise RunInputError(f"a title is at most {TITLE_CHARS} characters")
    return str(body["title"])


def _time(seconds: Any) -> str | None:
    if not isinstance(seconds, (int, float)):
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def _summary(thread_id: str, value: dict[str, Any] | None) -> dict[str, Any]:
    value = value or {}
    return {"threadId": thread_id, "title": value.get("title", ""),
            "createdAt": _time(value.get("created")),
            "updatedAt": _time(value.get("updated"))}  # fmt: skip


def _encode_cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(parts)).decode().rstrip("=")


def _decode_cursor(cursor: str) -> list[Any]:
    try:
        parts = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        raise RunInputError("the cursor is not one this server gave") from None
    if not isinstance(parts, list):
        raise RunInputError("the cursor is not one this server gave")
    return parts


def _status(run: dict[str, Any] | None) -> str | None:
    if run is None:
        return None
    status = str(run["status"])
    return "running" if status == "accepted" and run.get("opened") else status


class ThreadService(Generic[M]):
    """A user's threads of one agent (the endpoint's channel, app name and namespace)."""

    def __init__(
        self,
        storage: Storage,
        exposed: ExposedState[M],
        queues: TurnQueues,
        *,
        channel: str,
        app_name: str | None,
        namespace: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage, self.exposed, self.queues, self.clock = storage, exposed, queues, clock
        self.channel, self.app_name, self.namespace = channel, app_name, namespace

    def ids(self, user: str, thread_id: str) -> TurnIds:
        """The turn ids of the user's thread (its session of this agent)."""
        return TurnIds(self.channel, user, thread_id, self.app_name, self.namespace)

    def _session(self, user: str, thread_id: str) -> str:
        return session_key(self.channel, thread_id, user, agent=self.app_name,
                           namespace=self.namespace)  # fmt: skip

    def _owner_key(self, thread_id: str) -> str:
        conversation = conversation_key(self.channel, thread_id, namespace=self.namespace)
        return thread_owner_key(conversation, self.app_name)

    async def check_owner(
        self, user: str, thread_id: str, *, deleting: type[Exception] = ThreadNotFoundError
    ) -> None:
        """`ThreadNotFoundError` for a thread nobody owns (`deleting` for one being
        deleted), `ThreadOwnerError` for another's."""
        key = self._owner_key(thread_id)
        found = await self.storage.read([key])
        _owned(found[key].value if key in found else None, user, deleting)

    async def has_run(self, user: str, thread_id: str, run_id: str) -> bool:
        """Whether the thread holds a record of run `run_id`."""
        key = run_key(self._session(user, thread_id), run_id)
        return key in await self.storage.read([key])

    async def read(self, user: str, thread_id: str, before: str | None) -> dict[str, Any]:
        """The thread's summary, exposed state, last page of messages (or the page before
        the cursor `before`) and recent runs, in three reads."""
        session = self._session(user, thread_id)
        owner_key, record_key = self._owner_key(thread_id), thread_record_key(session)
        start = None
        if before is not None:
            parts = _decode_cursor(before)
            if len(parts) != 1 or not isinstance(parts[0], str):
                raise RunInputError("the cursor is not one this server gave")
            start = parts[0]
        ids = self.ids(user, thread_id)
        async with open_turn(self.storage, ids, extra_keys=(owner_key, record_key)) as turn:
            turn.discard()
            owner, record = await turn.fetch({owner_key: Owner, record_key: ThreadRecord})
            _owned(owner.stored(), user)
            summary = record.stored()
            runs = list(summary["runs"]) if summary is not None else []
            run_keys = {run_key(session, str(run["id"])): run for run in runs}
            try:
                messages = await turn.history.before(start, MESSAGES_PAGE, along=run_keys)
            except HistoryError:
                raise RunInputError("the cursor names no message of this thread") from None
            count = await turn.history.count()
            older = count > len(messages) if start is None else len(messages) == MESSAGES_PAGE
            records = await turn.fetch(dict.fromkeys(run_keys, _RunStatus))
            stored = [_status(found.stored()) for found in records]
            state = self.exposed.view(self.exposed.load(turn.session))
        listed = []
        for run, status in zip(runs, stored, strict=True):
            if status is not None:
                listed.append({"runId": run["id"], "status": status,
                               "createdAt": _time(run.get("created")),
                               "finishedAt": _time(run.get("finished"))})  # fmt: skip
        cursor = _encode_cursor(messages[0]["id"]) if older and messages else None
        return {**_summary(thread_id, summary), "state": state, "messages": messages,
                "before": cursor, "runs": listed}  # fmt: skip

    async def list(self, user: str, limit: int, cursor: str | None) -> dict[str, Any]:
        """A page of the user's threads of this agent, the last updated first, from their
        thread index: at most `limit`, after `cursor`. An index entry whose summary is gone
        (its session expired) is left out and taken out of the index."""
        after = _decode_cursor(cursor) if cursor is not None else None
        if after is not None and not (
            len(after) == 2 and isinstance(after[0], (int, float)) and isinstance(after[1], str)
            and not isinstance(after[0], bool)
        ):  # fmt: skip
            raise RunInputError("the cursor is not one this server gave")
        keys = self.index(user)
        stretch = await read_stretch(self.storage, keys, limit,
                                     (float(after[0]), after[1]) if after else None)  # fmt: skip
        records = {t: thread_record_key(self._session(user, t)) for _, t in stretch.entries}
        owners = {t: self._owner_key(t) for t in records}  # a thread being deleted is gone
        items = await self.storage.read([*records.values(), *owners.values()]) if records else {}
        threads, stale = [], []
        for updated, thread_id in stretch.entries:
            found = items.get(records[thread_id])
            value = found.value if found is not None else None
            if value is None or value.get("updated") != updated:
                stale.append((updated, thread_id))  # expired, or an older entry of it
            elif value.get("format") == FORMAT and _live(items.get(owners[thread_id]), user):
                threads.append(_summary(thread_id, value))
        if stale:
            try:  # at the versions read: what changed meanwhile is left to the next listing
                await self.storage.write(stretch.cleanup(keys, stale))
            except ConflictError:
                pass
        last = stretch.entries[-1] if stretch.entries else None
        return {"threads": threads,
                "next": _encode_cursor(*last) if stretch.more and last else None}  # fmt: skip

    def index(self, user: str) -> IndexKeys:
        """The keys of the user's thread index of this agent."""
        return IndexKeys.of(self.channel, user, self.app_name, self.namespace)

    def _record_key(self, turn: TurnState) -> str:
        key = turn.session.key
        assert key is not None  # an AG-UI turn has a user and a thread
        return thread_record_key(key)

    async def accepted(self, turn: TurnState, run_input: RunAgentInput) -> None:
        """In a run's accepting turn: the run listed in the thread's summary; a new thread
        enters the user's index."""
        (record,) = await turn.fetch({self._record_key(turn): ThreadRecord})
        assert isinstance(record, ThreadRecord)
        new = record.stored() is None
        note_accepted(record, run_input, self.clock())
        if new:
            entry = (float(record.value["updated"]), run_input.thread_id)
            await edit_in_turn(turn, self.index(str(turn.ids.user_id)), Edit(inserts=[entry]))

    async def finishing(self, turn: TurnState) -> ThreadRecord:
        """At the start of a run's committing turn: the thread's summary (the user's index
        head read along, for `finished`)."""
        head = self.index(str(turn.ids.user_id)).head
        (record,) = await turn.fetch({self._record_key(turn): ThreadRecord}, along=[head])
        assert isinstance(record, ThreadRecord)
        return record

    async def finished(self, turn: TurnState, record: ThreadRecord, run_id: str) -> None:
        """In a run's committing turn: the thread was updated now (it moves to the front of
        the user's index), and the run ended."""
        before = record.stored()
        thread_id = str(turn.ids.conversation_id)
        edit = Edit()
        if before is not None:
            edit.removes.append((float(before["updated"]), thread_id))
        note_finished(record, run_id, self.clock())
        edit.inserts.append((float(record.value["updated"]), thread_id))
        await edit_in_turn(turn, self.index(str(turn.ids.user_id)), edit)

    async def rename(self, user: str, thread_id: str, title: str) -> dict[str, Any]:
        """Give the thread a new title; its summary."""
        session = self._session(user, thread_id)
        owner_key, record_key = self._owner_key(thread_id), thread_record_key(session)
        ids = self.ids(user, thread_id)
        async with self.queues.turn(ids), open_turn(self.storage, ids) as turn:
            owner, record = await turn.fetch({owner_key: Owner, record_key: ThreadRecord})
            _owned(owner.stored(), user)
            assert isinstance(record, ThreadRecord)
            new = record.stored() is None
            value = _made(record, self.clock(), title)
            value["title"] = title
            if new:  # its session expired but for the owner: it enters the index again
                edit = Edit(inserts=[(float(value["updated"]), thread_id)])
                await edit_in_turn(turn, self.index(user), edit)
            summary = _summary(thread_id, value)
        return summary

    async def delete(self, user: str, thread_id: str) -> None:
        """Delete the thread all-or-nothing (see docs/agui.md): mark its owner record
        `deleting` (a write at the version read, taking the thread out of the user's index
        in the same write), then delete its session (state, history,
        runs, records) and the user's index entry of the conversation when no other session
        of the user is in it, and last the owner record. From the mark on, the thread is
        gone to every route and a run's commit is refused (runs hold the owner record as a
        read check); a delete that finds the mark (one died half way) finishes it."""
        ids = self.ids(user, thread_id)
        session, owner_key = self._session(user, thread_id), self._owner_key(thread_id)
        etag = await self._mark(user, thread_id, session, owner_key)
        async with self.queues.turn(ids):  # this process's runs of the thread end first
            base = session_key(self.channel, thread_id, user, namespace=self.namespace)
            theirs = [key async for key in self.storage.list(base)]
            mine = [key for key in theirs if key == session or key.startswith(session + "/")]
            others = [key for key in theirs if key not in mine and
                      (key == base or key.startswith(base + "/"))]  # fmt: skip
            keys = list(mine)
            if not others:
                index = user_key(self.channel, user, namespace=self.namespace)
                keys.append(f"{index}/sessions/{escape_segment(thread_id)}")
            for start in range(0, len(keys), BATCH):
                await self.storage.delete(keys[start : start + BATCH])
            try:  # at the marked version: a new thread of the same id is never taken
                await self.storage.delete([owner_key], if_match={owner_key: etag} if etag else None)
            except ConflictError:
                pass  # another delete finished first

    async def _mark(self, user: str, thread_id: str, session: str, owner_key: str) -> str | None:
        """Mark the owner record `deleting` and take the thread out of the user's index in
        one write (nothing when a delete marked it already); the owner record's version."""
        keys, record_key = self.index(user), thread_record_key(session)
        for attempt in range(MARK_ATTEMPTS):
            found = await self.storage.read([owner_key, record_key, keys.head])
            owner = found.get(owner_key)
            value = owner.value if owner is not None else None
            _owned(value, user, None)
            assert owner is not None and value is not None
            if "deleting" in value:
                return str(owner.etag) if owner.etag is not None else None
            summary = found.get(record_key)
            updated = summary.value.get("updated") if summary is not None else None
            edit = Edit(removes=[(float(updated), thread_id)] if updated is not None else [])
            writes = await edit_writes(self.storage, keys, found.get(keys.head), edit)
            writes[owner_key] = StoreItem({**value, "deleting": self.clock()}, owner.etag)
            try:
                etags: dict[str, str] = await self.storage.write(writes)
                return etags[owner_key]
            except ConflictError as exc:  # another delete marked it first: it may try again
                if owner_key in exc.keys or attempt == MARK_ATTEMPTS - 1:
                    raise StateConflictError([owner_key], scopes=[Owner.kind]) from None
        raise AssertionError("unreachable")  # the last attempt returns or raises


def _live(owner: StoreItem | None, user: str) -> bool:
    """Whether an owner record names `user` and no delete of the thread has begun."""
    value = owner.value if owner is not None else None
    return isinstance(value, dict) and value.get("user") == user and "deleting" not in value


def _owned(owner: dict[str, Any] | None, user: str,
           deleting: type[Exception] | None = ThreadNotFoundError) -> None:  # fmt: skip
    """`ThreadNotFoundError` for no owner, `deleting` (None: not refused) for a thread being
    deleted, `ThreadOwnerError` for another user's."""
    if owner is None:
        raise ThreadNotFoundError("no such thread")
    if deleting is not None and "deleting" in owner:
        raise deleting("no such thread" if deleting is ThreadNotFoundError
                       else "the thread is being deleted: DELETE it to finish")  # fmt: skip
    if owner.get("user") != user:
        raise ThreadOwnerError("this thread belongs to another user")
