"""`TurnState`: every bucket of one turn, loaded in one read and saved in at most one write.

Keys: `state["user:name"]` is the member `name` of the user bucket and `state["topic"]`
(no prefix) one of the session bucket, as in Google ADK; a key names one member, as is
(`"user:last.login"` is the member `last.login`), in `[]`, `in`, `del`, `get`, `set`, `has`,
`delete`, `setdefault`, `update` and `to_dict` alike. Paths: a dotted key whose first step
names a scope, `state.get("user.profile.name")`, walks into nested dicts, lists and models
(`get`, `set`, `has`, `delete` only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from ._bucket import AgentState, document_of
from ._document import DELIVERED, Document, Merge, R
from ._errors import (
    MissingIdError,
    ScopeError,
    StateClosedError,
    StatePathError,
    UndeclaredScopeError,
)
from ._history import History
from ._ids import TurnIds
from ._paths import MISSING
from ._plan import Declaration, Plan, Scopes
from .backends import StoreItem
from .backends._items import BuiltKeys
from .backends._keys import check_key, check_keys


class TurnState:
    """The buckets of one turn: built-in scopes plus custom ones, one bucket object per key.

    A scope whose key needs an id the turn lacks (say, no conversation) is skipped by
    `load` and `save`; touching it raises `MissingIdError`. Bucket objects are made when
    first used: a scope the turn never touches costs nothing beyond its share of the read.
    """

    __slots__ = (
        "ids", "discarded", "closed", "rerun", "_declared", "_home", "_evidence",
        "_scopes", "_plan", "_buckets", "_documents", "_unstored", "_found", "_read", "_history",
    )  # fmt: skip

    def __init__(
        self,
        ids: TurnIds,
        scopes: Scopes | Iterable[type[AgentState]] = (),
        found: Mapping[str, StoreItem] | None = None,
        read: Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]] | None = None,
        declared: Declaration | None = None,
    ) -> None:
        """The buckets of `ids` planned by `scopes` (a `Scopes`, or custom scope classes added
        to the built-in ones), starting from the stored `found` items (`open_turn` reads them
        in one batch; keys not found start empty). `read` (the storage's) serves the
        documents a turn loads later (`fetch`: its session's history). `declared`: the only
        stored scopes the turn reads and may use (a route's `scopes=`); None: every scope."""
        self.ids = ids
        self._declared = declared
        self.discarded = False
        self.closed = False
        self.rerun = True
        self._scopes = scopes if isinstance(scopes, Scopes) else Scopes(scopes)
        self._plan = self._scopes.plan(ids)
        self._buckets: dict[str, AgentState] = {}
        """The buckets made so far, by scope name."""
        self._documents: dict[str, Document] = {}
        """The stored documents used so far (persisted buckets' and records), by key."""
        self._unstored: list[Document] = []
        """The documents of the buckets used so far that are never stored (temp)."""
        self._found = dict(found or {})
        self._read = read
        self._history: History | None = None
        self._home = self._choose_home() if found is not None else None  # else at `load`
        self._evidence: tuple[str, Merge, bool] | None = None
        """The evidence entry the save adds (`note_evidence`): name, merge, home."""

    async def load(self, extra_keys: tuple[str, ...] = ()) -> None:
        """Read every planned bucket (or the declared ones), and `extra_keys` (framework
        records, see `attach`), in one batched read through `read` (`open_turn` does this
        before the turn)."""
        keys = first_read(self._plan, self._declared)
        if extra_keys:  # the plan's keys were checked when built; these are checked here
            keys = BuiltKeys(dict.fromkeys((*keys, *check_keys(extra_keys))))
        if keys:
            read = self._read if self._read is not None else self._storage_read()
            self._found.update(await read(keys))
        self._home = self._choose_home()

    def _choose_home(self) -> str | None:
        """The scope of the evidence's home: the first in `Plan.evidence` order of those the
        turn may use that was stored when the turn read it, else the user's bucket (it needs
        no index entry, unlike a new session), else the first of them; when the turn may use
        no stored scope, the one `first_read` read."""
        plan, found = self._plan, self._found
        names = plan.evidence
        if self._declared is not None:
            names = tuple(name for name in names if self._allowed(name))
        if not names:
            return _fallback(plan.evidence) if plan.evidence else None
        for name in names:
            if plan.scopes[name][1] in found:
                return name
        return _fallback(names)

    def _allowed(self, name: str) -> bool:
        """Whether the turn may use scope `name` (every scope unless the route declares)."""
        declared = self._declared
        return declared is None or name in declared.scopes

    def delivered(self, name: str) -> list[tuple[str, Any]]:
        """The delivery evidence entries named `name` in the documents this turn read, with the
        key of the document holding each (see `state/_delivery.py`)."""
        found: list[tuple[str, Any]] = []
        for key, document in self._documents.items():
            if document.delivered is not None and name in document.delivered:
                found.append((key, document.delivered[name]))
        for key, item in self._found.items():
            delivered = item.value.get(DELIVERED)
            if isinstance(delivered, dict) and name in delivered:
                found.append((key, delivered[name]))
        return found

    def note_evidence(self, name: str, merge: Merge, *, home: bool = False) -> None:
        """Have the turn's save add an evidence entry (`Document.note`) to the document
        `evidence_document(home=home)` gives then: chosen when the turn is saved
        (`stored_documents`), so the bytes its check serializes are the ones written."""
        self._evidence = (name, merge, home)

    def evidence_document(self, *, home: bool = False, saving: bool = False) -> Document | None:
        """The document this turn's delivery evidence goes in: the first of its documents in
        `Plan.evidence` order that its save writes, else (or with `home`) its home (see
        `_choose_home`); None when the turn has no stored scope. `saving`: asked by the save
        itself, which writes the bytes this check serializes (`Document.changed_now`)."""
        plan = self._plan
        if not home:
            for name in plan.evidence:
                document = self._documents.get(plan.scopes[name][1] or "")
                if document is not None and (
                    document.changed_now() if saving else document.changed
                ):
                    return document
        scope = self._home
        if scope is None:
            return None
        if self._allowed(scope):
            return document_of(self.scope(scope))
        cls, key = plan.scopes[scope]  # an undeclared home: read, never handed out
        document = self._documents.get(key or "")
        if document is None:
            document = self._documents[key or ""] = document_of(
                cls(key, self._found.pop(key or "", None))
            )
        return document

    def stored_documents(self) -> list[Document]:
        """The stored documents this turn has used so far (the only ones that can change):
        its persisted buckets' and its records; the evidence noted (`note_evidence`) is added
        to the document it goes in first: call this only to save them at once."""
        evidence = self._evidence
        if evidence is not None:
            self._evidence = None
            document = self.evidence_document(home=evidence[2], saving=True)
            if document is not None:
                document.note(evidence[0], evidence[1])
        return list(self._documents.values())

    def attach(self, cls: type[R], key: str) -> R:
        """A framework record of this turn, from what the turn read (`fetch` reads those it
        has not), saved with it."""
        record = self._documents.get(key)
        if record is None:  # its key is checked once here, so the save need not
            record = self._documents[key] = cls(check_key(key), self._found.pop(key, None))
        if not isinstance(record, cls):
            raise ScopeError(f"key {key!r} is not a {cls.kind} record in this turn")
        return record

    async def fetch(self, records: Mapping[str, type[R]], along: Iterable[str] = ()) -> list[R]:
        """Framework records (key -> class) read after the turn's first read, those not
        yet loaded in one more read; saved with the turn like `attach`ed ones. The keys
        `along` go in the same read, for records the caller attaches or fetches next."""
        if self.closed:
            raise StateClosedError("history")
        wanted = [*records, *along]
        missing = [key for key in wanted if key not in self._documents and key not in self._found]
        if missing:
            self._found.update(await self._storage_read()(missing))
        return [self.attach(cls, key) for key, cls in records.items()]

    def _storage_read(self) -> Callable[[Iterable[str]], Awaitable[dict[str, StoreItem]]]:
        if self._read is None:
            raise RuntimeError("this TurnState was made without a storage to read from")
        return self._read

    @property
    def history(self) -> History:
        """The message history of this turn's session (see `agent_state.History`)."""
        if self._history is None:
            self._history = History(self, _require_key(self.scope("session")))
        return self._history

    def changed(self) -> bool:
        """Whether saving the turn now would write anything."""
        return any(document.changed for document in self._documents.values())

    def discard(self) -> None:
        """Drop this turn's changes: `open_turn` saves nothing for it."""
        self.discarded = True

    def forbid_rerun(self) -> None:
        """Make a conflict fail this turn (`StateConflictError`, nothing of it saved) rather
        than run it again: for turns with effects outside the state (a payment, an email)."""
        self.rerun = False

    def close(self) -> None:
        """End the turn (`open_turn` does, once saved or discarded): any later use of its
        state raises `StateClosedError`, so a late edit can never be silently lost."""
        self.closed = True
        for document in self._documents.values():
            document.close()
        for document in self._unstored:
            document.close()

    def scope(self, name: str) -> AgentState:
        """The bucket of a scope; `MissingIdError` if the turn lacks an id its key needs."""
        if self.closed:
            raise StateClosedError(name)
        bucket = self._buckets.get(name)
        if bucket is not None:
            return bucket
        planned = self._plan.scopes.get(name)
        if planned is not None:
            cls, key = planned
            if self._declared is not None and key is not None and name not in self._declared.scopes:
                raise UndeclaredScopeError(name, self._declared.scopes, self._declared.route)
            if key is None:
                bucket = self._buckets[name] = cls(None, None)
                self._unstored.append(document_of(bucket))
                return bucket
            bucket = self._buckets[name] = cls(key, self._found.pop(key, None))
            self._documents[key] = document_of(bucket)
            return bucket
        missing = self._plan.missing.get(name)
        if missing is not None:
            raise MissingIdError(missing.scope, missing.missing)
        raise ScopeError(f"unknown scope {name!r}; known: {', '.join(self.scope_names)}")

    @property
    def scope_names(self) -> list[str]:
        """Every scope of this turn, including those it lacks ids for."""
        return sorted([*self._plan.scopes, *self._plan.missing])

    @property
    def user(self) -> AgentState:
        """The user's state on this channel."""
        return self.scope("user")

    @property
    def conversation(self) -> AgentState:
        """The conversation's state, shared by its members."""
        return self.scope("conversation")

    @property
    def session(self) -> AgentState:
        """This user's state in this conversation."""
        return self.scope("session")

    @property
    def app(self) -> AgentState:
        """The application's global state."""
        return self.scope("app")

    @property
    def temp(self) -> AgentState:
        """Scratch state of this turn, never stored."""
        return self.scope("temp")

    def __getattr__(self, name: str) -> AgentState:
        if name.startswith("_") or name not in self._scopes.names:
            raise AttributeError(f"{type(self).__name__} has no attribute or scope {name!r}")
        return self.scope(name)

    def __getitem__(self, key: str) -> Any:
        bucket, name = self._member(key)
        return bucket[name]

    def __setitem__(self, key: str, value: Any) -> None:
        bucket, name = self._member(key)
        bucket[name] = value

    def __delitem__(self, key: str) -> None:
        bucket, name = self._member(key)
        del bucket[name]

    def __contains__(self, key: str) -> bool:
        bucket, name = self._member(key)
        return name in bucket

    def setdefault(self, key: str, default: Any = None) -> Any:
        """`state[key]` when present, else set it to `default` and return that."""
        bucket, name = self._member(key)
        return bucket.setdefault(name, default)

    def update(
        self, members: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **more: Any
    ) -> None:
        """Set several keys, as `dict.update`; every key is checked before any is set."""
        pairs = [*(members.items() if isinstance(members, Mapping) else members), *more.items()]
        targets = [(*self._member(key), value) for key, value in pairs]
        for bucket, name, value in targets:
            bucket[name] = value

    def keys(self) -> list[str]:
        """Every member of every scope this turn has ids for (and may use), as the key that
        `[]` takes: `"user:name"`, and a session member plain (`"topic"`) unless that would read
        as another key (`"session:user.x"`). Reads every bucket whole, as `.data` does."""
        return [
            self._key_of(scope, name)
            for scope in self._plan.scopes
            if self._allowed(scope) or self._plan.scopes[scope][1] is None
            for name in self.scope(scope)
        ]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def to_dict(self) -> dict[str, Any]:
        """Every member of the turn's scopes under its `keys()` key, as `dict(state)` gives;
        values are what `[]` returns (in-place edits of them are saved)."""
        return {key: self[key] for key in self.keys()}

    def get(self, path: str, default: Any = None) -> Any:
        """The value of a key or path (`"user:name"`, `"conversation.count"`), or `default`."""
        bucket, parts = self._locate(path)
        value = bucket.get_path(parts)
        return default if value is MISSING else value

    def set(self, path: str, value: Any) -> None:
        """Set the value of a key or path (`"user.profile.name"`), creating missing dicts."""
        bucket, parts = self._locate(path)
        bucket.set_path(parts, value)

    def delete(self, path: str) -> None:
        """Remove the value of a key or path, if present."""
        bucket, parts = self._locate(path)
        bucket.delete_path(parts)

    def has(self, path: str) -> bool:
        """Whether a value (falsy ones too) exists at a key or path."""
        bucket, parts = self._locate(path)
        return bucket.get_path(parts) is not MISSING

    def _member(self, key: str) -> tuple[AgentState, str]:
        """The bucket and member a key names (`"user:name"`, `"topic"`); a dotted path such
        as `"user.name"` is refused, since `[]` would otherwise take it as a session member."""
        if not isinstance(key, str):
            raise TypeError(f"state keys are str, got {type(key).__name__}")
        scope, steps, path = self._scopes.locate(key)
        if path:
            head, _, rest = key.partition(".")
            raise StatePathError(
                f"state[{key!r}] is a path, not a key; for a member of the {head} scope write "
                f"state[{f'{head}:{rest}'!r}], or state.get/set({key!r}) for a path"
            )
        return self.scope(scope), steps[0]

    def _key_of(self, scope: str, name: str) -> str:
        """The key `[]` takes for a member: `"scope:name"`, or a session member's plain name
        when that reads back as the same member."""
        if scope == "session":
            try:
                if self._scopes.locate(name) == (scope, (name,), False):
                    return name
            except StatePathError:  # "", "user.": no key on its own
                pass
        return f"{scope}:{name}"

    def _locate(self, key: str) -> tuple[AgentState, tuple[str, ...]]:
        """The bucket and steps of a key (one step) or dotted path (see `Scopes.locate`)."""
        if not isinstance(key, str):
            raise StatePathError(f"a path must be a str, got {type(key).__name__}")
        scope, steps, _ = self._scopes.locate(key)
        return self.scope(scope), steps


def first_read(plan: Plan, declared: Declaration | None) -> BuiltKeys:
    """The keys a turn's load reads: the plan's, or those of the declared stored scopes, or
    of the evidence's home when none is declared (a turn with an activity id writes its
    evidence there). Checked when the plan was built."""
    if declared is None:
        return plan.keys
    keys = tuple(key for name, (_, key) in plan.scopes.items() if name in declared.scopes and key)
    if not keys and plan.evidence:
        keys = (plan.scopes[_fallback(plan.evidence)][1] or "",)
    return BuiltKeys(keys)


def _fallback(names: tuple[str, ...] | list[str]) -> str:
    """The home of evidence when none of `names` (in evidence order) is stored yet."""
    return "user" if "user" in names else names[0]


def _require_key(bucket: AgentState) -> str:
    """The key of a persisted bucket (the session's, for its history)."""
    if bucket.key is None:
        raise ScopeError(f"the {bucket.scope} scope is not stored, so it keeps no history")
    return bucket.key
