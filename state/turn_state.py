"""`TurnState`: every bucket of one turn, loaded in one read and saved in at most one write.

Keys: `state["user:name"]` is the member `name` of the user bucket and `state["topic"]`
(no prefix) one of the session bucket, as in Google ADK; the key after the prefix is taken
as is. Paths: `state.get("user.profile.name")` walks into nested dicts, lists and models; a
first step that names no scope makes the whole path session state (`state.get("topic")`),
and `"user:profile.name"` works too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from backends.base import Storage

from . import typed
from .bucket import AgentState, load_buckets, save_buckets
from .errors import MissingIdError, ScopeError, StatePathError
from .ids import TurnIds
from .paths import MISSING, delete_in, get_in, set_in, split_path
from .scopes import BUILTIN_SCOPES

_BUILTIN = {cls.scope: cls for cls in BUILTIN_SCOPES}


class TurnState:
    """The buckets of one turn: built-in scopes plus custom ones, one bucket object per key.

    A scope whose key needs an id the turn lacks (say, no conversation) is skipped by
    `load` and `save`; touching it raises `MissingIdError`.
    """

    __slots__ = ("ids", "_buckets", "_missing")

    def __init__(self, ids: TurnIds, custom_scopes: Iterable[type[AgentState]] = ()) -> None:
        self.ids = ids
        self._buckets: dict[str, AgentState] = {}
        self._missing: dict[str, MissingIdError] = {}
        owners: dict[str, str] = {}
        for name, cls in _scope_classes(custom_scopes).items():
            if not cls.persisted:
                self._buckets[name] = cls()
                continue
            try:
                key = cls.key_for(ids)
            except MissingIdError as exc:
                self._missing[name] = exc
                continue
            if key in owners:
                raise ScopeError(f"scopes {owners[key]!r} and {name!r} have the same key {key!r}")
            owners[key] = name
            self._buckets[name] = cls(key)

    async def load(self, storage: Storage) -> None:
        """Load every persisted bucket of the turn in one batched read."""
        await load_buckets(storage, self._persisted())

    async def save(self, storage: Storage) -> None:
        """Write the changed buckets in one conditional write; nothing when none changed.

        Raises `StateConflictError` naming the scopes another writer changed meanwhile.
        """
        await save_buckets(storage, self._persisted())

    def scope(self, name: str) -> AgentState:
        """The bucket of a scope; `MissingIdError` if the turn lacks an id its key needs."""
        bucket = self._buckets.get(name)
        if bucket is not None:
            return bucket
        missing = self._missing.get(name)
        if missing is not None:
            raise MissingIdError(missing.scope, missing.missing)
        raise ScopeError(f"unknown scope {name!r}; known: {', '.join(self.scope_names)}")

    @property
    def scope_names(self) -> list[str]:
        """Every scope of this turn, including those it lacks ids for."""
        return sorted([*self._buckets, *self._missing])

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
        if name.startswith("_") or (name not in self._buckets and name not in self._missing):
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
        value = get_in(bucket.data, parts)
        return default if value is MISSING else value

    def set(self, path: str, value: Any) -> None:
        """Set the value at a path such as `"user.profile.name"`, creating missing dicts."""
        bucket, parts = self._locate(path)
        try:
            set_in(bucket.data, parts, value)
        except ValidationError as exc:
            raise typed.validation_error(bucket.key, exc, parts[:-1]) from exc

    def delete(self, path: str) -> None:
        """Remove the value at a path, if present."""
        bucket, parts = self._locate(path)
        delete_in(bucket.data, parts)

    def has(self, path: str) -> bool:
        """Whether a value (falsy ones too) exists at a path."""
        bucket, parts = self._locate(path)
        return get_in(bucket.data, parts) is not MISSING

    def _persisted(self) -> list[AgentState]:
        return [bucket for bucket in self._buckets.values() if bucket.persisted]

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
        if first in self._buckets or first in self._missing:
            if not rest:
                raise StatePathError(f"path {path!r} names a whole scope; add a key inside it")
            return self.scope(first), split_path(rest)
        return self.scope("session"), split_path(path)


_RESERVED = frozenset(name for name in dir(TurnState) if not name.startswith("_"))


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
