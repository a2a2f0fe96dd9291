"""`AgentState`: the user's bucket, one scope's document for one turn, dict-like.

A bucket is the user's API over a `Document` underneath (`document_of`), which holds the
loaded value, its version, the baseline and the change, and which the lifecycle loads,
saves, rebases and closes. The bucket records what the turn reads (each `get`, `[]`, `in`
and path lookup; `data`, iteration and `len` read everything), so a conflicting save is
rebased only when provably serial, and marks what it lends: a bucket that handed out only
scalars and was never edited costs nothing at save. A typed bucket's document decodes the
stored JSON into its model and encodes it back.
"""

from __future__ import annotations

from abc import ABCMeta
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ValidationError

from . import _typed as typed
from ._document import Document
from ._errors import ScopeError, StateValueError
from ._ids import TurnIds
from ._paths import MISSING, check_json, child, delete_in, drop, get_in, members, put, set_in
from .backends import StoreItem


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
    _document: ClassVar[type[Document]]
    """The class of this bucket class's documents (its scope, ttl, model), made with it."""

    __slots__ = ("_doc",)
    _doc: Document

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
        cls._document = _document_class(cls)

    def __init__(self, key: str | None = None, item: StoreItem | None = None) -> None:
        self._doc = self._document(key, item)

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
        return self._doc.key

    @property
    def etag(self) -> str | None:
        """The stored version this bucket starts from; None when it was not stored yet."""
        return self._doc.etag

    @property
    def data(self) -> Any:
        """The live document: the model instance of a typed bucket, else a dict of JSON values."""
        doc = self._doc
        root = doc.root()
        doc.read_all = doc.exposed = True
        return root

    @data.setter
    def data(self, value: Any) -> None:
        self._doc.edited()
        if self.model is not None:
            if not isinstance(value, self.model):
                raise StateValueError(f"{type(self).__name__}.data must be a {self.model.__name__}")
        elif isinstance(value, dict):
            check_json(value)
        else:
            raise StateValueError(f"{type(self).__name__}.data must be a dict")
        self._doc.replace(value)

    def __getitem__(self, key: str) -> Any:
        doc = self._doc
        value = child(doc.root(), key)
        doc.reads.add((key,))
        if value is MISSING:
            raise KeyError(key)
        if type(value) not in _SCALARS:
            doc.exposed = True
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """The value of `key`, or `default` when absent (falsy stored values are returned)."""
        doc = self._doc
        value = child(doc.root(), key)
        doc.reads.add((key,))
        if value is MISSING:
            return default
        if type(value) not in _SCALARS:
            doc.exposed = True
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        try:
            put(self._doc.edited(), key, value)
        except ValidationError as exc:
            raise typed.validation_error(self._doc.key, exc) from exc

    def set(self, key: str, value: Any) -> None:
        """Set `key` to a JSON value (a model field's value in a typed bucket)."""
        self[key] = value

    def __delitem__(self, key: str) -> None:
        if not drop(self._doc.edited(), key):
            raise KeyError(key)

    def delete(self, key: str) -> None:
        """Remove `key` if present (no error when it is absent)."""
        drop(self._doc.edited(), key)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        doc = self._doc
        found = child(doc.root(), key) is not MISSING
        doc.reads.add((key,))
        return found

    def __iter__(self) -> Iterator[str]:
        doc = self._doc
        names = members(doc.root())
        doc.read_all = True
        return iter(names)

    def __len__(self) -> int:
        doc = self._doc
        names = members(doc.root())
        doc.read_all = True
        return len(names)

    def clear(self) -> None:
        """Empty the bucket; a typed bucket goes back to its model's defaults."""
        doc = self._doc
        root = doc.edited()
        if isinstance(doc, _ModelDocument):
            doc.reset()
        else:
            root.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key={self._doc.key!r}, etag={self._doc.etag!r})"

    def get_path(self, parts: tuple[str, ...]) -> Any:
        """The value at a path of member names / list indices, or `MISSING` when absent."""
        doc = self._doc
        value = get_in(doc.root(), parts)
        doc.reads.add(parts)
        if value is not MISSING and type(value) not in _SCALARS:
            doc.exposed = True
        return value

    def set_path(self, parts: tuple[str, ...], value: Any) -> None:
        """Set the value at a path, creating missing intermediate dicts."""
        try:
            set_in(self._doc.edited(), parts, value)
        except ValidationError as exc:
            raise typed.validation_error(self._doc.key, exc, parts[:-1]) from exc

    def delete_path(self, parts: tuple[str, ...]) -> bool:
        """Remove the value at a path; return whether it was there."""
        return delete_in(self._doc.edited(), parts)

    @property
    def changed(self) -> bool:
        """Whether the document differs from what was loaded (or last saved), nested edits too."""
        return self._doc.changed

    def changes(self) -> list[dict[str, Any]]:
        """The change since load (or the last save) as an RFC 6902 patch; [] when unchanged."""
        return self._doc.changes()

    def document(self) -> dict[str, Any]:
        """A fresh copy of the document as it would be stored now."""
        doc = self._doc
        doc.root()
        doc.read_all = True
        copy: dict[str, Any] = orjson.loads(doc.dump(doc.document()))
        return copy


def _document_class(cls: type[AgentState]) -> type[Document]:
    """The document class of bucket class `cls`: its scope, ttl and last-writer-wins choice,
    and for a typed bucket its model (`typed.Schema`)."""
    namespace: dict[str, Any] = {
        "__slots__": (),
        "kind": getattr(cls, "scope", cls.__name__),
        "ttl": cls.ttl,
        "last_writer_wins": cls.last_writer_wins,
    }
    if cls.model is None:
        return type(f"{cls.__name__}Document", (Document,), namespace)
    schema = typed.Schema(cls.__name__, cls.model, cls.schema_version, cls._migrations)
    return type(f"{cls.__name__}Document", (_ModelDocument,), {**namespace, "schema": schema})


def document_of(bucket: AgentState) -> Document:
    """The document under a bucket, which the lifecycle loads, saves, rebases and closes."""
    return bucket._doc


class _ModelDocument(Document):
    """A typed bucket's document: the live value is the model; the stored members the model
    does not declare are kept aside (`kept`) and written back as they were."""

    schema: ClassVar[typed.Schema]
    __slots__ = ("kept", "migrated")
    kept: dict[str, Any]
    migrated: bool
    """Whether the stored document was at an older schema version (migrated on decode)."""

    def __init__(self, key: str | None, item: StoreItem | None) -> None:
        self.kept = {}
        self.migrated = False
        super().__init__(key, item)

    def load(self, item: StoreItem | None) -> None:
        super().load(item)
        self.kept = {}
        self.migrated = False

    def upgrade_write(self) -> StoreItem | None:
        if not self.migrated or self.closed:
            return None
        document = self.document()
        self._pending = self.dump(document)
        return self._item(document, self._pending)

    def mark_saved(self, etag: str) -> None:
        super().mark_saved(etag)
        self.migrated = False

    def rebase(self, newer: StoreItem | None) -> None:
        outdated = newer is not None and typed.outdated(self.schema, newer.value)
        super().rebase(newer)
        self.migrated = outdated

    def reset(self) -> None:
        """Go back to the model's defaults (`AgentState.clear`)."""
        self._value, self.kept = typed.decode(self.schema, self.key, None)

    def document(self) -> dict[str, Any]:
        return typed.encode(self.schema, self._value, self.kept)

    def root(self) -> Any:
        if self._value is None and not self.closed:  # decode the model first
            loaded = self._loaded
            self.migrated = loaded is not None and typed.outdated(self.schema, loaded)
            self._value, self.kept = typed.decode(self.schema, self.key, loaded)
            self._base = self.dump(typed.encode(self.schema, self._value, self.kept))
            self._loaded = self._stored = None
        return super().root()

    def _adopt(self, merged: dict[str, Any]) -> None:
        self._value, self.kept = typed.decode(self.schema, self.key, merged)

    def _check(self, document: dict[str, Any], dumped: bytes) -> None:
        typed.check(self.schema, self.key, document)


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Types of values no in-place edit can change."""


AgentState._document = _document_class(AgentState)


def _is_scope_name(name: object) -> bool:
    return isinstance(name, str) and name.isidentifier() and name.islower() and name[0] != "_"
