"""`TurnState`: every bucket of one turn, loaded in one read and saved in at most one write.

Keys: `state["user:name"]` is the member `name` of the user bucket and `state["topic"]`
(no prefix) one of the session bucket, as in Google ADK; the key after the prefix is taken
as is. Paths: `state.get("user.profile.name")` walks into nested dicts, lists and models; a
first step that names no scope makes the whole path session state (`state.get("topic")`),
and `"user:profile.name"` works too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any, NamedTuple

from pydantic import ValidationError

from . import _typed as typed
from ._bucket import AgentState, save_merging, scope_key
from ._errors import MissingIdError, ScopeError, StatePathError
from ._ids import TurnIds
from ._paths import MISSING, delete_in, set_in, split_path
from ._scopes import BUILTIN_SCOPES
from .backends._base import Storage, StoreItem

_BUILTIN = {cls.scope: cls for cls in BUILTIN_SCOPES}
PLAN_CACHE_SIZE = 4096
"""Distinct ids whose keys an application keeps (about 1 KB each)."""
MERGE_RETRIES = 3
"""How many times `TurnState.save` merges into a newer version after a conflict."""


class TurnState:
    """The buckets of one turn: built-in scopes plus custom ones, one bucket object per key.

    A scope whose key needs an id the turn lacks (say, no conversation) is skipped by
    `load` and `save`; touching it raises `MissingIdError`. Bucket objects are made when
    first used: a scope the turn never touches costs nothing beyond its share of the read.
    """

    __slots__ = ("ids", "_plan", "_buckets", "_found")

    def __init__(
        self, ids: TurnIds, custom_scopes: Iterable[type[AgentState]] | Scopes = ()
    ) -> None:
        """`custom_scopes`: extra scope classes, or a `Scopes` built once for many turns."""
        self.ids = ids
        scopes = custom_scopes if isinstance(custom_scopes, Scopes) else Scopes(custom_scopes)
        self._plan = scopes.plan(ids)
        self._buckets: dict[str, AgentState] = {}
        self._found: dict[str, StoreItem] = {}

    async def load(self, storage: Storage) -> None:
        """Load every persisted bucket of the turn in one batched read."""
        keys = self._plan.keys
        self._found = await storage.read_shared(keys) if keys else {}
        for bucket in self._buckets.values():
            if bucket.persisted:
                bucket.load(self._found.get(bucket.key))  # type: ignore[arg-type]

    async def save(self, storage: Storage, *, retries: int = MERGE_RETRIES) -> None:
        """Write the changed buckets in one conditional write; nothing when none changed.

        If another writer changed a bucket since it was read, the turn's changes to it are
        replayed onto the newer version and written again, at most `retries` times: changes
        to different members merge. `StateConflictError` names the scopes (and the paths)
        when both changed the same path (even to the same value: two `n + 1` agree), when
        the bucket was deleted meanwhile, or when the retries run out; its `written` names
        the buckets stored anyway.
        """
        buckets = [bucket for bucket in self._buckets.values() if bucket.persisted]
        await save_merging(storage, buckets, retries=retries, strict=True)

    def scope(self, name: str) -> AgentState:
        """The bucket of a scope; `MissingIdError` if the turn lacks an id its key needs."""
        bucket = self._buckets.get(name)
        if bucket is not None:
            return bucket
        planned = self._plan.scopes.get(name)
        if planned is not None:
            cls, key = planned
            bucket = self._buckets[name] = cls(key, self._found.get(key))  # type: ignore[arg-type]
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
        if name.startswith("_") or not self._plan.has(name):
            raise AttributeError(f"{type(self).__name__} has no attribute or scope {name!r}")
        return self.scope(name)

    def __getitem__(self, key: str) -> Any:
        bucket, name = self._split_key(key)
        return bucket[name]

    def __setitem__(self, key: str, value: Any) -> None:
        bucket, name = self._split_key(key)
        bucket[name] = value

    def __delitem__(self, key: str) -> None:
        bucket, name = self._split_key(key)
        del bucket[name]

    def __contains__(self, key: str) -> bool:
        bucket, name = self._split_key(key)
        return name in bucket

    def get(self, path: str, default: Any = None) -> Any:
        """The value at a path such as `"conversation.count"`, or `default` when absent."""
        bucket, parts = self._locate(path)
        value = bucket._get_in(parts)
        return default if value is MISSING else value

    def set(self, path: str, value: Any) -> None:
        """Set the value at a path such as `"user.profile.name"`, creating missing dicts."""
        bucket, parts = self._locate(path)
        try:
            set_in(bucket._edit_root(parts), parts, value)
        except ValidationError as exc:
            raise typed.validation_error(bucket.key, exc, parts[:-1]) from exc

    def delete(self, path: str) -> None:
        """Remove the value at a path, if present."""
        bucket, parts = self._locate(path)
        delete_in(bucket._edit_root(parts), parts)

    def has(self, path: str) -> bool:
        """Whether a value (falsy ones too) exists at a path."""
        bucket, parts = self._locate(path)
        return bucket._get_in(parts) is not MISSING

    def _split_key(self, key: str) -> tuple[AgentState, str]:
        """`"user:name"` -> (user bucket, "name"); no prefix -> the session bucket."""
        if not isinstance(key, str):
            raise TypeError(f"state keys are str, got {type(key).__name__}")
        scope, colon, name = key.partition(":")
        return (self.scope(scope), name) if colon else (self.scope("session"), key)

    def _locate(self, path: str) -> tuple[AgentState, tuple[str, ...]]:
        """Resolve a path's scope (`"user.a"`, `"user:a"`, else session) and its steps."""
        if not isinstance(path, str):
            raise StatePathError(f"a path must be a str, got {type(path).__name__}")
        head, colon, rest = path.partition(":")
        if colon and "." not in head:
            return self.scope(head), split_path(rest)
        first, _, rest = path.partition(".")
        if self._plan.has(first):
            if not rest:
                raise StatePathError(f"path {path!r} names a whole scope; add a key inside it")
            return self.scope(first), split_path(rest)
        return self.scope("session"), split_path(path)


_RESERVED = frozenset(name for name in dir(TurnState) if not name.startswith("_"))


class Plan(NamedTuple):
    """The buckets of a turn with given ids; shared by every such turn, so never mutated."""

    scopes: dict[str, tuple[type[AgentState], str | None]]
    """Each scope's bucket class and storage key (None for a scope that is never stored)."""
    keys: tuple[str, ...]
    """The keys to read, in scope order."""
    missing: dict[str, MissingIdError]
    """The scopes whose key needs an id these ids lack."""

    def has(self, name: str) -> bool:
        """Whether `name` is a scope of the turn (with or without the ids it needs)."""
        return name in self.scopes or name in self.missing


class Scopes:
    """The scope classes of a turn, built-in plus custom ones, checked once, and their keys.

    `AgentApplication` builds one and hands it to every `TurnState`, so turns skip the checks
    and the keys of recently seen ids come from a bounded cache (`key_for` depends on ids only).
    """

    __slots__ = ("classes", "plan")

    def __init__(self, custom_scopes: Iterable[type[AgentState]] = ()) -> None:
        self.classes: tuple[tuple[str, type[AgentState]], ...] = tuple(
            _scope_classes(custom_scopes).items()
        )
        self.plan: Callable[[TurnIds], Plan] = lru_cache(maxsize=PLAN_CACHE_SIZE)(self._plan)

    def _plan(self, ids: TurnIds) -> Plan:
        """The buckets of a turn with `ids`; `ScopeError` when two scopes share a key."""
        scopes: dict[str, tuple[type[AgentState], str | None]] = {}
        missing: dict[str, MissingIdError] = {}
        owners: dict[str, str] = {}
        for name, cls in self.classes:
            if not cls.persisted:
                scopes[name] = (cls, None)
                continue
            try:
                key = scope_key(cls, ids)
            except MissingIdError as exc:
                missing[name] = exc
                continue
            if key in owners:
                raise ScopeError(f"scopes {owners[key]!r} and {name!r} have the same key {key!r}")
            owners[key] = name
            scopes[name] = (cls, key)
        return Plan(scopes, tuple(owners), missing)


def _scope_classes(custom_scopes: Iterable[type[AgentState]]) -> dict[str, type[AgentState]]:
    """The built-in scopes with the custom ones added (or replacing a built-in they subclass)."""
    classes = dict(_BUILTIN)
    custom: dict[str, type[AgentState]] = {}
    for cls in custom_scopes:
        if not (isinstance(cls, type) and issubclass(cls, AgentState)):
            raise ScopeError(f"custom scopes are AgentState subclasses, got {cls!r}")
        name = getattr(cls, "scope", None)
        if name is None:
            raise ScopeError(f"{cls.__name__} needs a `scope` name")
        if custom.get(name, cls) is not cls:
            raise ScopeError(f"{custom[name].__name__} and {cls.__name__} both claim {name!r}")
        builtin = _BUILTIN.get(name)
        if builtin is not None and not issubclass(cls, builtin):
            raise ScopeError(
                f"{cls.__name__} claims the built-in scope {name!r}; "
                f"subclass {builtin.__name__} to replace it"
            )
        if builtin is None and name in _RESERVED:
            raise ScopeError(f"scope name {name!r} clashes with TurnState.{name}")
        if cls.persisted and cls.key_for.__func__ is AgentState.key_for.__func__:  # type: ignore[attr-defined]
            raise ScopeError(f"{cls.__name__} is persisted, so it must override key_for()")
        custom[name] = classes[name] = cls
    return classes
