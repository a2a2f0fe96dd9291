"""Google ADK bridge: `AgentStateSessionService`, an ADK `BaseSessionService` on any of our
stores, sharing `user:`/`app:` state with agent-state bots.

Needs the `.[adk]` extra (google-adk). See docs/adk.md.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections import OrderedDict
from types import EllipsisType
from typing import Any, Final, NamedTuple

import orjson
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions import BaseSessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
from pydantic_core import to_jsonable_python

from .. import (
    DELIVERED,
    AgentState,
    AppState,
    History,
    HistoryError,
    Scopes,
    SessionState,
    StateConflictError,
    TurnIds,
    TurnState,
    UserState,
    app_key,
    escape_segment,
    open_turn,
    parse_key,
    session_key,
    user_key,
)
from ..backends import ConflictError, FormatError, Storage, StoreItem
from ._copies import deep_copy

__all__ = ["AgentStateSessionService"]

APP, USER, TEMP = "app:", "user:", "temp:"
RECORD_SUFFIX: Final = "/adk"
STALE: Final = (
    "The session has been modified in storage since it was loaded; reload it (get_session) "
    "before appending more events."
)
_MISSING: Final = object()
_CREATE_ATTEMPTS: Final = 5
EVENTS_REMEMBERED: Final = 8192
"""How many decoded events a service keeps (by history message id, whose digest pins the
content), so loading a session copies events (`_copies`) instead of validating each one
again."""
RACE_RETRIES: Final = 3
"""How many times an append that read what it rests on writes again after a conflict that
changed none of it (on stores that commit key by key, racing appends can refuse each other
with no winner); a change to anything it read raises `StaleSessionError` at once."""
DOCUMENTS_REMEMBERED: Final = 4096
"""How many documents' last known version and bytes a service keeps (records, buckets,
history heads), so an append right after a load or an append writes at once, conditional on
those versions, without reading them again."""
DECODED_REMEMBERED: Final = 16
"""How many of those documents (records and history heads) a service also keeps decoded:
those of the sessions loaded or appended to last, which the appends right after use. Only
the bytes are kept of the others (a head decoded is a tree of its messages, which the
garbage collector would walk for every idle session); an append to one decodes it again."""


class _SessionRecord(AgentState):
    """An ADK session's own document, beside its state bucket: who it belongs to, when it was
    created (a nonce that tells incarnations apart), its revision and last update time."""

    scope = "adk_session"

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        channel, conversation, user = ids.require(
            cls.scope, "channel_id", "conversation_id", "user_id"
        )
        key = session_key(channel, conversation, user, agent=ids.app_name, namespace=ids.namespace)
        return key + RECORD_SUFFIX


_SCOPES = Scopes([UserState, SessionState, AppState, _SessionRecord], include_builtin=False)


class _Keys(NamedTuple):
    """The documents of one ADK session a load reads and an append writes."""

    record: str
    session: str
    app: str
    user: str
    head: str

    @classmethod
    def of(cls, ids: TurnIds) -> _Keys:
        scopes = _SCOPES.plan(ids).scopes
        record, session = scopes[_SessionRecord.scope][1], scopes["session"][1]
        app, user = scopes["app"][1], scopes["user"][1]
        assert record and session and app and user  # every id is given (`_ids`)
        return cls(record, session, app, user, History.head_key(session))


class AgentStateSessionService(BaseSessionService):
    """ADK sessions on our store. A session is our session scope (the ADK session id is the
    conversation id, on channel `channel_id`), its events are messages of our history, and
    `app:`/`user:` keys live in our app and user buckets (`temp:` keys are never stored).

    `append_event` is one all-or-nothing conditional write; a session object that storage has
    moved past, or a lost race, raises ADK's `StaleSessionError`, never overwriting. With
    `check_scoped_keys`, an `app:`/`user:` key the event sets that another writer changed
    since the session was loaded raises it too. `namespace=...` (the default) puts each app
    in its own namespace (ADK's user state is per app and user); pass a str, or None, to
    share the user and app buckets with a bot in that namespace.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        channel_id: str = "adk",
        namespace: str | None | EllipsisType = ...,
        check_scoped_keys: bool = True,
    ) -> None:
        if not isinstance(storage, Storage):
            raise TypeError("AgentStateSessionService needs an agent_state.backends.Storage")
        escape_segment(channel_id, what="channel id")
        if isinstance(namespace, str):
            escape_segment(namespace, what="namespace")
        self.storage = storage
        self.channel_id = channel_id
        self.namespace = namespace
        self.check_scoped_keys = check_scoped_keys
        self._events: OrderedDict[str, Event] = OrderedDict()
        """History message id -> its event as decoded or appended here (never handed out: each
        session gets a copy)."""
        self._known: OrderedDict[str, tuple[str | None, bytes]] = OrderedDict()
        """Key -> (version, JSON bytes) last read or written here (version None: absent)."""
        self._places: OrderedDict[tuple[str, str, str], tuple[TurnIds, _Keys]] = OrderedDict()
        """(app name, user id, session id) -> the session's ids and document keys."""
        self._decoded: OrderedDict[str, tuple[bytes, dict[str, Any]]] = OrderedDict()
        """Record and history head keys -> (their bytes in `_known`, them decoded), read-only
        here, so an append after a load or an append decodes neither again (the last
        `DECODED_REMEMBERED`)."""

    # --- sessions -----------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        session_id = session_id.strip() if session_id else None
        session_id = session_id or uuid.uuid4().hex
        ids = self._ids(app_name, user_id, session_id)
        deltas = _split(_json_safe(state or {}))
        for attempt in range(_CREATE_ATTEMPTS):
            try:
                async with open_turn(self.storage, ids, scopes=_SCOPES) as turn:
                    record = turn.scope(_SessionRecord.scope)
                    if len(record):
                        raise AlreadyExistsError(f"Session with id {session_id} already exists.")
                    record.data = {
                        "format": 1, "app_name": app_name, "user_id": user_id, "id": session_id,
                        "created": uuid.uuid4().hex, "revision": 0, "last_update_time": time.time(),
                    }  # fmt: skip
                    _apply(turn, deltas)
                    await turn.history.append()  # started here, indexed for forget_user
                    return self._session(turn, record.document(), [])
            except StateConflictError:
                if attempt == _CREATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        session_id = session_id.strip() if session_id else session_id
        ids, keys = self._located(app_name, user_id, session_id)
        found = await self.storage.read(keys)  # the buckets, record and history head at once
        self._learn_found(keys, found)
        record = _value(found, keys.record)
        if not _belongs(record, app_name):
            return None
        head = found.get(keys.head)
        recent = None if config is None else config.num_recent_events
        messages = History.recent(keys.session, head, recent)
        if messages is not None:  # read-only here: remembered decoded for the next append
            for item, key in ((head, keys.head), (found[keys.record], keys.record)):
                if item is not None and item.data is not None:
                    self._keep_decoded(key, item.data, item.value)
        if messages is None:  # some are on pages: the turn's history reads them
            turn = TurnState(ids, _SCOPES, found=found, read=self.storage.read)
            try:
                messages = await _messages(turn, config)
            finally:
                turn.close()
        kept = [self._event(message) for message in messages]
        if config is not None and config.after_timestamp is not None:
            kept = _after(kept, config.after_timestamp)
        events = [deep_copy(event) for event in kept]  # the caller's own
        state = _merged(
            _value(found, keys.session), _value(found, keys.app), _value(found, keys.user)
        )
        return _build(record, record["id"], record["user_id"], record["app_name"], state, events)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        namespace = self._namespace(app_name)
        head = session_key(self.channel_id, "c", "u", namespace=namespace).rsplit("/", 3)[0]
        found: list[tuple[str, str, str]] = []  # (record key, session id, user id)
        async for key in self.storage.list(head + "/"):
            if not key.endswith(RECORD_SUFFIX):
                continue
            try:
                parsed = parse_key(key[: -len(RECORD_SUFFIX)], namespace=namespace)
            except ValueError:
                continue
            if parsed.scope != "session" or parsed.channel != self.channel_id:
                continue
            if parsed.app != app_name:  # the session of another agent
                continue
            assert parsed.user is not None and parsed.conversation is not None
            if user_id is None or parsed.user == user_id:
                found.append((key, parsed.conversation, parsed.user))
        if not found:
            return ListSessionsResponse()
        users = {user_key(self.channel_id, u, namespace=namespace) for _, _, u in found}
        app = app_key(app_name, namespace=namespace)
        keys = [k for k, _, _ in found] + [k[: -len(RECORD_SUFFIX)] for k, _, _ in found]
        items = await self.storage.read([*keys, *users, app])
        app_state = _value(items, app)
        sessions = []
        for key, session_id, user in found:
            record = _value(items, key)
            if not _belongs(record, app_name):
                continue
            state = _merged(
                _value(items, key[: -len(RECORD_SUFFIX)]),
                app_state,
                _value(items, user_key(self.channel_id, user, namespace=namespace)),
            )
            sessions.append(_build(record, session_id, user, app_name, state, []))
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        namespace = self._namespace(app_name)
        bucket = session_key(
            self.channel_id, session_id, user_id, agent=app_name, namespace=namespace
        )
        record = bucket + RECORD_SUFFIX
        found = await self.storage.read([record])
        if record not in found or not _belongs(found[record].value, app_name):
            return
        await self.storage.delete([record])  # the session is gone from here on
        history = [key async for key in self.storage.list(bucket + "/history")]
        await self.storage.delete([bucket, *history])

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        key = user_key(self.channel_id, user_id, namespace=self._namespace(app_name))
        return _value(await self.storage.read([key]), key)

    # --- events -------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        stored = _event_json(event)
        deltas = _split(stored.get("actions", {}).get("state_delta") or {})
        message_id = _message_id(event.id, stored)
        message = {
            "id": message_id, "role": _role(event), "content": _text(stored), "adk_event": stored,
        }  # fmt: skip
        ids, keys = self._located(session.app_name, session.user_id, session.id)
        marker = await self._append_known(session, event, keys, deltas, message)
        if marker is None:
            self._forget(keys)
            marker = await self._append_read(session, event, ids, deltas, message)
            if marker is None:  # an equal event delivered again: already appended
                return event
        await super().append_event(session, event)  # applies `temp:` to the session, trims it
        self._remember(message_id, deep_copy(event))
        session.last_update_time = event.timestamp
        _set_marker(session, marker)
        return event

    async def _append_known(
        self,
        session: Session,
        event: Event,
        keys: _Keys,
        deltas: dict[str, dict[str, Any]],
        message: dict[str, Any],
    ) -> str | None:
        """Append in one conditional write built on the versions this service last read or
        wrote, reading nothing; the session's new marker, or None (nothing written) when a
        version is not known here, a check on the known ones fails, or the write conflicts:
        `_append_read` then decides on what storage holds. Each document whose content the
        write rests on is written or checked at its known version, so a stale one only
        conflicts."""
        record_known, head_known = self._known.get(keys.record), self._known.get(keys.head)
        if record_known is None or record_known[0] is None:
            return None
        if head_known is None or head_known[0] is None:  # a turn starts the history
            return None
        record = self._value_of(keys.record, record_known[1])
        if not _belongs(record, session.app_name) or not _is_fresh(session, record):
            return None
        head = self._value_of(keys.head, head_known[1])
        try:  # the message is built of the event's decoded JSON: its bytes go as they are
            history = History.batch(
                keys.session,
                StoreItem(head, head_known[0], head_known[1]),
                [message],
                encoded=[orjson.dumps(message)],
            )
        except FormatError:
            return None  # not a head of this version: the reading path reports it
        changes: dict[str, StoreItem] = {}
        unchanged: dict[str, str | None] = {}
        for scope, key in (("session", keys.session), ("app", keys.app), ("user", keys.user)):
            if not deltas[scope]:
                continue
            known = self._known.get(key)
            if known is None:
                return None
            value = orjson.loads(known[1])
            if scope != "session" and self.check_scoped_keys:
                if _scoped_changed(session, scope, value, deltas[scope]) is not None:
                    return None
            value.update(deltas[scope])
            data = orjson.dumps(value)
            if data == known[1] and known[0] is not None:
                unchanged[key] = known[0]
            else:
                changes[key] = StoreItem(value, known[0], data)
        record = dict(record, revision=int(record.get("revision", 0)) + 1)
        record["last_update_time"] = event.timestamp
        changes[keys.record] = _item(record, record_known[0])
        changes.update(history)
        try:
            etags = await self.storage.write(changes, unchanged=unchanged or None)
        except ConflictError:
            return None
        for key in keys:
            if key in etags:
                self._learn(key, etags[key], changes[key].data or b"{}")
        for key in (keys.record, keys.head):
            written = changes[key]
            assert written.data is not None
            self._keep_decoded(key, written.data, written.value)
        return _marker(record)

    async def _append_read(
        self,
        session: Session,
        event: Event,
        ids: TurnIds,
        deltas: dict[str, dict[str, Any]],
        message: dict[str, Any],
    ) -> str | None:
        """Append in a turn that reads what it rests on first; the session's new marker, or
        None when the history already holds this very event."""
        try:
            async with open_turn(self.storage, ids, scopes=_SCOPES, retries=RACE_RETRIES) as turn:
                record = turn.scope(_SessionRecord.scope)
                if not _belongs(record.document(), session.app_name):
                    raise SessionNotFoundError(f"Session {session.id} not found.")
                if not _is_fresh(session, record.document()):
                    raise StaleSessionError(STALE)
                if self.check_scoped_keys:
                    _check_scoped(turn, session, deltas)
                try:  # its one read finds the message id too
                    await turn.history.append(message)
                except HistoryError:
                    if not await turn.history.holds([message["id"]]):
                        raise
                    turn.discard()
                    return None
                _apply(turn, deltas)
                record["revision"] = int(record.get("revision", 0)) + 1
                record["last_update_time"] = event.timestamp
                return _marker(record.document())
        except StateConflictError as exc:
            raise StaleSessionError(STALE) from exc

    # --- helpers --------------------------------------------------------------------------

    def _event(self, message: dict[str, Any]) -> Event:
        """A history message's event as this service remembers it (decoded once per service;
        the caller hands on a copy, never the event)."""
        known = self._events.get(message["id"])
        if known is None:
            known = Event.model_validate(message["adk_event"])
            self._remember(message["id"], known)
            return known
        self._events.move_to_end(message["id"])
        return known

    def _remember(self, message_id: str, event: Event) -> None:
        self._events[message_id] = event
        if len(self._events) > EVENTS_REMEMBERED:
            self._events.popitem(last=False)

    def _value_of(self, key: str, data: bytes) -> dict[str, Any]:
        """`data` (the bytes remembered of `key`) decoded, once while they stay decoded here;
        read-only: a caller that changes it changes a copy."""
        decoded = self._decoded.get(key)
        if decoded is not None and decoded[0] is data:
            return decoded[1]
        value: dict[str, Any] = orjson.loads(data)
        self._keep_decoded(key, data, value)
        return value

    def _keep_decoded(self, key: str, data: bytes, value: dict[str, Any]) -> None:
        """Remember `value`, decoded from `data` (the bytes `_known` holds of `key`)."""
        self._decoded[key] = (data, value)
        self._decoded.move_to_end(key)
        if len(self._decoded) > DECODED_REMEMBERED:
            self._decoded.popitem(last=False)

    def _learn(self, key: str, etag: str | None, data: bytes) -> None:
        """Remember `key` at version `etag` (None: absent) holding `data`."""
        self._known[key] = (etag, data)
        self._known.move_to_end(key)
        if len(self._known) > DOCUMENTS_REMEMBERED:
            self._decoded.pop(self._known.popitem(last=False)[0], None)

    def _learn_found(self, keys: _Keys, found: dict[str, StoreItem]) -> None:
        """Remember what a read found of `keys` (before the values are handed on)."""
        for key in keys:
            item = found.get(key)
            if item is None:
                self._learn(key, None, b"{}")
            else:
                self._learn(key, item.etag, item.data or orjson.dumps(item.value))

    def _forget(self, keys: _Keys) -> None:
        """Drop what is remembered of a session's documents (before reading them anew)."""
        for key in keys:
            self._known.pop(key, None)
            self._decoded.pop(key, None)

    def _namespace(self, app_name: str) -> str | None:
        if not isinstance(app_name, str) or not app_name:
            raise ValueError("app_name must be a non-empty str")
        return app_name if isinstance(self.namespace, EllipsisType) else self.namespace

    def _located(self, app_name: str, user_id: str, session_id: str) -> tuple[TurnIds, _Keys]:
        """A session's ids and document keys (worked out once per session while remembered)."""
        place = (app_name, user_id, session_id)
        if type(app_name) is not str or type(user_id) is not str or type(session_id) is not str:
            ids = self._ids(app_name, user_id, session_id)  # raises, or takes a str subclass
            return ids, _Keys.of(ids)
        known = self._places.get(place)
        if known is None:
            ids = self._ids(app_name, user_id, session_id)
            known = self._places[place] = (ids, _Keys.of(ids))
            if len(self._places) > DOCUMENTS_REMEMBERED:
                self._places.popitem(last=False)
        return known

    def _ids(self, app_name: str, user_id: str, session_id: str) -> TurnIds:
        for name, value in (("user_id", user_id), ("session_id", session_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str")
        return TurnIds(
            channel_id=self.channel_id,
            user_id=user_id,
            conversation_id=session_id,
            app_name=app_name,
            namespace=self._namespace(app_name),
        )

    def _session(self, turn: TurnState, record: dict[str, Any], events: list[Event]) -> Session:
        state = _merged(turn.session.document(), turn.app.document(), turn.user.document())
        return _build(record, record["id"], record["user_id"], record["app_name"], state, events)


def _build(
    record: dict[str, Any],
    session_id: str,
    user_id: str,
    app_name: str,
    state: dict[str, Any],
    events: list[Event],
) -> Session:
    session = Session(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state=state,
        events=events,
        last_update_time=float(record.get("last_update_time", 0.0)),
    )
    _set_marker(session, _marker(record))
    return session


def _marker(record: dict[str, Any]) -> str:
    return f"{record.get('created')}:{record.get('revision')}"


_MARKER: Final = "_storage_update_marker"


def _get_marker(session: Session) -> Any:
    """ADK's private revision marker of `session` (read from pydantic's private store: the
    attribute lookup goes through `BaseModel.__getattr__`, a slow path on every append)."""
    private = session.__pydantic_private__
    return private.get(_MARKER) if private is not None else session._storage_update_marker


def _set_marker(session: Session, marker: str) -> None:
    private = session.__pydantic_private__
    if private is not None:
        private[_MARKER] = marker
    else:  # pragma: no cover - a Session always has its private store
        session._storage_update_marker = marker


def _belongs(record: dict[str, Any], app_name: str) -> bool:
    """Whether a record exists and is this app's (a shared namespace may hold others')."""
    return bool(record) and record.get("app_name") == app_name


def _value(items: dict[str, Any], key: str) -> dict[str, Any]:
    """The state a stored document holds: without a bot's delivery evidence (`DELIVERED`),
    which writes here keep (they update the stored value, or go through a turn)."""
    item = items.get(key)
    if item is None:
        return {}
    value = dict(item.value)
    value.pop(DELIVERED, None)
    return value


def _merged(session: dict[str, Any], app: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    state = dict(session)
    state.update({APP + k: v for k, v in app.items()})
    state.update({USER + k: v for k, v in user.items()})
    return state


def _split(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """ADK's rule: `app:` and `user:` keys to their buckets, `temp:` dropped, the rest session;
    `ValueError` for a key stored as `DELIVERED`, reserved for a bot's delivery evidence."""
    deltas: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in state.items():
        if key.startswith(APP):
            deltas["app"][key[len(APP) :]] = value
        elif key.startswith(USER):
            deltas["user"][key[len(USER) :]] = value
        elif not key.startswith(TEMP):
            deltas["session"][key] = value
    for changes in deltas.values():
        if DELIVERED in changes:
            raise ValueError(
                f"state key {DELIVERED!r} (also after app: or user:) is reserved for the "
                "delivery evidence of agent-state bots"
            )
    return deltas


def _apply(turn: TurnState, deltas: dict[str, dict[str, Any]]) -> None:
    for scope, changes in deltas.items():
        bucket = turn.scope(scope)
        for key, value in changes.items():
            bucket[key] = value


def _check_scoped(turn: TurnState, session: Session, deltas: dict[str, dict[str, Any]]) -> None:
    """Raise the stale-session error if an `app:`/`user:` key the event sets is no longer
    what the session loaded (another writer changed it in between)."""
    for scope in ("app", "user"):
        changed = _scoped_changed(session, scope, turn.scope(scope), deltas[scope])
        if changed is not None:
            raise StaleSessionError(f"{STALE} ({changed} changed meanwhile)")


def _scoped_changed(
    session: Session, scope: str, stored: AgentState | dict[str, Any], changes: dict[str, Any]
) -> str | None:
    """The first key of `changes` (to the `app` or `user` bucket `stored`) whose stored value
    is not what `session` loaded, with its prefix; None when there is none."""
    prefix = APP if scope == "app" else USER
    for key in changes:
        seen = session.state.get(prefix + key, _MISSING)
        now = stored.get(key, _MISSING)
        if (_MISSING if seen is _MISSING else _json_safe({"v": seen})["v"]) != now:
            return prefix + key
    return None


def _is_fresh(session: Session, record: dict[str, Any]) -> bool:
    """Whether `session` is of the stored session `record` at its latest revision."""
    marker = _get_marker(session)
    if marker is not None:
        return bool(marker == _marker(record))
    return float(record.get("last_update_time", 0.0)) <= session.last_update_time


def _item(value: dict[str, Any], etag: str | None) -> StoreItem:
    """A write of `value` (JSON built here) conditional on `etag` (None: create only)."""
    return StoreItem(value, etag, orjson.dumps(value))


def _json_safe(state: dict[str, Any]) -> dict[str, Any]:
    """ADK's coercion: values serialized faithfully where they can be, else as strings."""
    try:
        safe: dict[str, Any] = to_jsonable_python(state)
    except Exception:  # a value pydantic cannot serialize: ADK stores its str
        safe = to_jsonable_python(state, fallback=str)
    return safe


def _event_json(event: Event) -> dict[str, Any]:
    """The event as stored: JSON, without `temp:` keys in its state delta."""
    dumped = event.__pydantic_serializer__.to_json(
        event, exclude_none=True, exclude_defaults=True, fallback=str, warnings=False
    )  # `model_dump_json` without its decode to str, or the collecting of type warnings
    stored: dict[str, Any] = orjson.loads(dumped)
    actions = stored.get("actions")
    if isinstance(actions, dict) and isinstance(actions.get("state_delta"), dict):
        delta = actions["state_delta"]
        if any(k.startswith(TEMP) for k in delta):
            actions["state_delta"] = {k: v for k, v in delta.items() if not k.startswith(TEMP)}
    return stored


def _message_id(event_id: str, stored: dict[str, Any]) -> str:
    """The event's history message id: its id and a digest of its content, so an equal event
    delivered again is found, and another event reusing the id is kept apart."""
    digest = hashlib.sha256(orjson.dumps(stored, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"{event_id}~{digest[:16]}"


def _role(event: Event) -> str:
    return "user" if event.author == "user" else "assistant"


def _text(stored: dict[str, Any]) -> str:
    parts = (stored.get("content") or {}).get("parts") or []
    return "".join(part["text"] for part in parts if isinstance(part.get("text"), str))


async def _messages(turn: TurnState, config: GetSessionConfig | None) -> list[dict[str, Any]]:
    """The history messages `config` asks for (all of them without one)."""
    history = turn.history
    if config is not None and config.num_recent_events is not None:
        return await history.last(config.num_recent_events) if config.num_recent_events else []
    return await history.first(await history.count())


def _after(events: list[Event], after: float) -> list[Event]:
    """ADK's filter: the events from the last one older than `after` on (exclusive)."""
    i = len(events) - 1
    while i >= 0 and events[i].timestamp >= after:
        i -= 1
    return events[i + 1 :]
