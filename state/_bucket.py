"""`AgentState`: one scope's document for one turn, dict-like, tracking what changed since load.

A bucket owns what it loads (storage reads are the caller's own copies), so it hands out its
members directly. Before it first hands out anything it records a baseline: the stored JSON
bytes when the storage gives them, else one serialization. A bucket that was never edited
and handed out only scalars costs nothing at save; one that was edited or lent a container
(which may have been edited in place) one serialization and a bytes comparison, and those
bytes are what gets written. The RFC 6902 patch against the start is only computed when
asked for (`changes()`) or when rebasing after a conflict. Loading and saving live in `_lifecycle`.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ValidationError

from . import _typed as typed
from ._errors import (
    ScopeError,
    StateClosedError,
    StateConflictError,
    StateError,
    StatePathError,
    StateValueError,
)
from ._ids import TurnIds
from ._paths import MISSING, check_json, child, delete_in, drop, get_in, members, put, set_in
from .backends import StoreItem
from .backends._json import DUMP_OPTIONS, JsonRuleError, check_encoded, encode_json
from .jsonpatch import PatchConflictError, apply_patch, make_patch, rebase_patch


class _Slotted(ABCMeta):
    """Gives every bucket class `__slots__`, so `bucket.name = x` fails instead of being lost."""

    def __new__(
        mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kw: Any
    ) -> _Slotted:
        namespace.setdefault("__slots__", ())
        return super().__new__(mcls, name, bases, namespace, **kw)


class AgentState(MutableMapping[str, Any], metaclass=_Slotted):
    """Base of every bucket: a dict of JSON values, or a pydantic model when `model` is set.

    Subclasses set `scope` (the name used by `TurnState` and in `"scope:key"` prefixes) and,
    when persisted, override `key_for`. A typed bucket (`model = MyModel`) exposes the model
    as `data`; its dict interface reads and sets the model's fields, and in-place edits to
    the model are saved. `schema_version` and `migration()` upgrade older stored documents.
    """

    scope: ClassVar[str]
    persisted: ClassVar[bool] = True
    last_writer_wins: ClassVar[bool] = False
    """When True, a turn's save overwrites whatever another writer stored meanwhile instead
    of merging or running again: an explicit choice for state where losing an update is
    fine (a cache, a last-seen timestamp)."""
    model: ClassVar[type[BaseModel] | None] = None
    ttl: ClassVar[float | None] = None
    """Seconds a saved document of this class lives (None: for good)."""
    schema_version: ClassVar[int | None] = None
    _migrations: ClassVar[dict[int, typed.Migration]] = {}

    __slots__ = (
        "_key",
        "_etag",
        "_loaded",
        "_stored",
        "_value",
        "_kept",
        "_base",
        "_pending",
        "_closed",
        "_reads",
        "_read_all",
        "_exposed",
        "_migrated",
    )
    _key: str | None
    _etag: str | None
    _loaded: dict[str, Any] | None
    _stored: bytes | None
    _value: Any
    _kept: dict[str, Any]
    _base: bytes | None
    _pending: bytes | None
    _closed: bool
    _reads: set[tuple[str, ...]]
    _read_all: bool
    _exposed: bool
    _migrated: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "scope" in cls.__dict__ and not _is_scope_name(cls.scope):
            raise ScopeError(f"{cls.__name__}.scope {cls.scope!r} must be a lower-case identifier")
        if cls.model is not None and not (
            isinstance(cls.model, type) and issubclass(cls.model, BaseModel)
        ):
            raise TypeError(f"{cls.__name__}.model must be a pydantic BaseModel subclass")
        version = cls.schema_version
        if version is not None and (cls.model is None or type(version) is not int or version < 1):
            raise TypeError(f"{cls.__name__}.schema_version needs a model and an int >= 1")
        cls._migrations = dict(cls._migrations)

    def __init__(self, key: str | None = None, item: StoreItem | None = None) -> None:
        self._key = key
        self._closed = False
        self.load(item)

    @classmethod
    def key_for(cls, ids: TurnIds) -> str:
        """The storage key of this scope for `ids`; `MissingIdError` names any missing id.

        It must depend on `ids` alone: applications cache the keys of recently seen ids.
        """
        raise ScopeError(f"scope {getattr(cls, 'scope', cls.__name__)!r} has no storage key")

    @classmethod
    def migration(cls, from_version: int) -> Callable[[typed.Migration], typed.Migration]:
        """Register a function upgrading a stored document from `from_version` to the next."""
        target = cls.schema_version
        if target is None or type(from_version) is not int or not 1 <= from_version < target:
            raise ValueError(
                f"{cls.__name__} migrations go from a version in 1..{(target or 1) - 1}"
            )
        if from_version in cls.__dict__["_migrations"]:
            raise ValueError(f"{cls.__name__} already has a migration from {from_version}")

        def register(fn: typed.Migration) -> typed.Migration:
            cls._migrations[from_version] = fn
            return fn

        return register

    @property
    def key(self) -> str | None:
        """The storage key, or None for a bucket that is never stored."""
        return self._key

    @property
    def etag(self) -> str | None:
        """The stored version this bucket starts from; None when it was not stored yet."""
        return self._etag

    @property
    def data(self) -> Any:
        """The live document: the model instance of a typed bucket, else a dict of JSON values."""
        root = self._root()
        self._read_all = self._exposed = True
        return root

    @data.setter
    def data(self, value: Any) -> None:
        self._edited()
        if self.model is not None:
            if not isinstance(value, self.model):
                raise StateValueError(f"{type(self).__name__}.data must be a {self.model.__name__}")
        elif isinstance(value, dict):
            check_json(value)
        else:
            raise StateValueError(f"{type(self).__name__}.data must be a dict")
        self._value = value

    def __getitem__(self, key: str) -> Any:
        value = child(self._root(), key)
        self._reads.add((key,))
        if value is MISSING:
            raise KeyError(key)
        return self._lend(value)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` when absent (falsy stored values are returned)."""
        value = child(self._root(), key)
        self._reads.add((key,))
        return default if value is MISSING else self._lend(value)

    def __setitem__(self, key: str, value: Any) -> None:
        try:
            put(self._edited(), key, value)
        except ValidationError as exc:
            raise typed.validation_error(self._key, exc) from exc

    def set(self, key: str, value: Any) -> None:
        """Set `key` to a JSON value (a model field's value in a typed bucket)."""
        self[key] = value

    def __delitem__(self, key: str) -> None:
        if not drop(self._edited(), key):
            raise KeyError(key)

    def delete(self, key: str) -> None:
        """Remove `key` if present (no error when it is absent)."""
        drop(self._edited(), key)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        found = child(self._root(), key) is not MISSING
        self._reads.add((key,))
        return found

    def __iter__(self) -> Iterator[str]:
        names = members(self._root())
        self._read_all = True
        return iter(names)

    def __len__(self) -> int:
        names = members(self._root())
        self._read_all = True
        return len(names)

    def clear(self) -> None:
        """Empty the bucket; a typed bucket goes back to its model's defaults."""
        root = self._edited()
        if isinstance(root, BaseModel):
            self._value, self._kept = typed.decode(type(self), self._key, None)
        else:
            root.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self._key!r}, etag={self._etag!r})"

    def was_read(self) -> bool:
        """Whether the turn read anything of this bucket (see `rebase`)."""
        return self._read_all or bool(self._reads)

    def close(self) -> None:
        """End the bucket's turn: every later use raises `StateClosedError`."""
        self._closed = True

    def get_path(self, parts: tuple[str, ...]) -> Any:
        """The value at a path of member names / list indices, or `MISSING` when absent."""
        value = get_in(self._root(), parts)
        self._reads.add(parts)
        return value if value is MISSING else self._lend(value)

    def set_path(self, parts: tuple[str, ...], value: Any) -> None:
        """Set the value at a path, creating missing intermediate dicts."""
        try:
            set_in(self._edited(), parts, value)
        except ValidationError as exc:
            raise typed.validation_error(self._key, exc, parts[:-1]) from exc

    def delete_path(self, parts: tuple[str, ...]) -> bool:
        """Remove the value at a path; return whether it was there."""
        return delete_in(self._edited(), parts)

    @property
    def changed(self) -> bool:
        """Whether the document differs from what was loaded (or last saved), nested edits too."""
        if self._base is None or not self._exposed:
            return False
        return self._dump(self._document()) != self._base

    def changes(self) -> list[dict[str, Any]]:
        """The change since load (or the last save) as an RFC 6902 patch; [] when unchanged."""
        if self._base is None:
            return []
        self._read_all = True
        return make_patch(orjson.loads(self._base), self._document())

    def document(self) -> dict[str, Any]:
        """A fresh copy of the document as it would be stored now."""
        self._root()
        self._read_all = True
        copy: dict[str, Any] = self._copy(self._document())
        return copy

    def load(self, item: StoreItem | None) -> None:
        """Start over from a stored version (None: not stored yet), dropping unsaved edits.

        The bucket takes ownership of `item.value`: it is the live document from now on.
        """
        self._loaded = item.value if item is not None else None
        self._stored = item.data if item is not None else None
        self._etag = item.etag if item is not None else None
        self._value = self._base = self._pending = None
        self._kept = {}
        self._reads = set()
        self._read_all = self._exposed = self._migrated = False

    def pending_write(self) -> StoreItem | None:
        """The write this bucket needs (document, its bytes, precondition), or None when unchanged.

        Its value is the live document: hand it to `Storage.write` and do not edit it until the
        write returns. Raises `StateValueError` /
        `StateValidationError` for a document that cannot be stored, before anything is written.
        """
        if self._base is None or not self._exposed:
            return None
        document = self._document()
        dumped = self._dump(document)
        if dumped == self._base:
            return None
        if self.model is not None:
            typed.check(type(self), self._key, document)
        else:
            self._check_lent(document, dumped)
        self._pending = dumped
        return StoreItem(document, self._etag, dumped, ttl=self.ttl)

    def upgrade_write(self) -> StoreItem | None:
        """The write storing this bucket's document at its model's schema version, when the
        stored one was older (migrated on load) and is unchanged; else None. A turn's save
        adds it to a write it makes anyway (`save_buckets`), never a write of its own."""
        if not self._migrated:
            return None
        document = self._document()
        self._pending = self._dump(document)
        return StoreItem(document, self._etag, self._pending, ttl=self.ttl)

    def mark_saved(self, etag: str) -> None:
        """Record that the last `pending_write()` (or `upgrade_write()`) was stored as `etag`."""
        if self._pending is None:
            raise StateError("mark_saved() needs a pending_write() first")
        self._base, self._etag, self._pending = self._pending, etag, None
        self._migrated = False

    def rebase(self, newer: StoreItem | None) -> None:
        """Replay this bucket's changes onto a newer stored version, after a write conflict.

        Allowed only when that gives what running this turn after the other writer would:
        the newer version changed nothing this bucket's turn read (each `get`, `[]`, `in`
        and path lookup is recorded; `data`, iteration and `len` read everything) or wrote.
        Else `StateConflictError` names the paths and the bucket is left as it was. A blind
        write the newer version already made is dropped. A stored document deleted since
        (`newer` None) is a conflict too, never recreated.
        """
        if self._base is None:
            self.load(newer)
            return
        if self.last_writer_wins:  # keep this document, written over the newer version
            self._etag = newer.etag if newer is not None else None
            return
        if newer is None and self._etag is not None:
            raise StateConflictError(
                [self._key or ""],
                scopes=[self.scope],
                message=f"{self.scope} state was deleted",
                retryable=False,
            )
        base = orjson.loads(self._base)
        fresh = type(self)(self._key, newer)
        fresh._root()
        theirs = fresh._document()
        reads = None if self._read_all else self._reads
        patch, clashes = rebase_patch(
            base, make_patch(base, self._document()), make_patch(base, theirs), reads=reads
        )
        if clashes:
            raise StateConflictError(
                [self._key or ""], scopes=[self.scope], paths=clashes, retryable=False
            )
        try:
            merged = apply_patch(theirs, patch)
        except PatchConflictError as exc:
            raise StateConflictError(
                [self._key or ""],
                scopes=[self.scope],
                message=f"cannot rebase: {exc}",
                retryable=False,
            ) from exc
        if self.model is None:
            self._value = merged
        else:
            self._value, self._kept = typed.decode(type(self), self._key, merged)
        self._loaded = self._stored = self._pending = None
        self._etag, self._base, self._migrated = fresh._etag, fresh._base, fresh._migrated

    def _check_lent(self, document: dict[str, Any], dumped: bytes) -> None:
        """Check what in-place edits may have changed: a NaN or tuple must not go out as null
        or a list. Assigned values were checked when set; in place, only a container the
        bucket handed out (found again by the read path that handed it out) can have been
        edited, or anything when the whole document was handed out (`data`)."""
        try:
            if self._read_all:
                check_encoded(document, dumped)
                return
            for parts in self._reads:
                if isinstance(value := _lent_value(document, parts), (dict, list)):
                    encode_json(value)
        except JsonRuleError as exc:
            raise StateValueError(f"state for key {self._key!r} is not JSON: {exc}") from None

    def _root(self) -> Any:
        """The live document (a dict, or a typed bucket's model), its baseline recorded first.

        Everything the bucket hands out comes from here, so no edit can happen before the
        baseline exists, and none after the bucket's turn ended.
        """
        if self._closed:
            raise StateClosedError(self.scope)
        if self._value is None:
            loaded = self._loaded
            if self.model is None:
                self._value = loaded if loaded is not None else {}
                stored = self._stored
                self._base = stored if stored is not None else self._dump(self._value)
            else:
                self._value, self._kept = typed.decode(type(self), self._key, loaded)
                self._base = self._dump(self._document())
                self._migrated = loaded is not None and typed.outdated(type(self), loaded)
            self._loaded = self._stored = None
        return self._value

    def _edited(self) -> Any:
        """`_root()` for an edit: the document may differ from its baseline from now on."""
        root = self._root()
        self._exposed = True
        return root

    def _lend(self, value: Any) -> Any:
        """`value`, handed out: a container (or model) may be edited in place, so the save
        must compare the document with its baseline; only a bucket that handed out scalars
        alone and was never edited is known unchanged without serializing it."""
        if type(value) not in _SCALARS:
            self._exposed = True
        return value

    def _document(self) -> dict[str, Any]:
        if self.model is None:
            return self._value  # type: ignore[no-any-return]
        return typed.encode(type(self), self._value, self._kept)

    def _copy(self, value: Any) -> Any:
        """A deep copy of JSON `value` that shares nothing with it."""
        return orjson.loads(self._dump(value))

    def _dump(self, document: dict[str, Any]) -> bytes:
        try:
            return orjson.dumps(document, option=DUMP_OPTIONS)
        except TypeError:
            try:
                encode_json(document)  # names the place and the reason
            except JsonRuleError as exc:
                raise StateValueError(f"state for key {self._key!r} is not JSON: {exc}") from None
            raise


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types of values no in-place edit can change."""


def _lent_value(document: dict[str, Any], parts: tuple[str, ...]) -> Any:
    """What a read path leads to now (MISSING when it no longer leads anywhere)."""
    try:
        return get_in(document, parts)
    except StatePathError:
        return MISSING


def _is_scope_name(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and name.islower() and name[0] != "_"
